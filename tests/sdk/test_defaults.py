"""Clients exactly as a user configures them by default, and the generator's golden vector.

Most tests pin botocore to SigV4 and path-style addressing so failures are easy to read;
these check that an SDK with nothing but an endpoint and credentials works too (boto3
still presigns S3 URLs with SigV2 by default, for instance).
"""

import hashlib

import boto3
import requests

from conftest import sha256, unique
from generated import generated_bytes, generated_etag


def test_generated_content_matches_the_golden_vector():
    # The same constants are asserted by origin-stub/src/generated.rs: if either
    # implementation of the definition drifts, one of the two tests fails.
    data = generated_bytes("bench", "golden.bin", 42, 0, 1000)
    assert hashlib.sha256(data).hexdigest() == "6fc2c36d2b4f3d65f71c5a55987c3ae1573184711794f91c1768f9521f01883c"
    assert generated_etag("bench", "golden.bin", 1000, 42) == '"68ce525e6e526b149aea9f49abaf8573"'


def default_client(stub):
    return boto3.session.Session(
        aws_access_key_id=stub.access_key,
        aws_secret_access_key=stub.secret_key,
        region_name=stub.region,
    ).client("s3", endpoint_url=stub.s3)


def test_default_boto3_client_round_trip_and_presigned_url(stub):
    s3 = default_client(stub)
    name = unique("dflt")
    s3.create_bucket(Bucket=name)
    body = b"defaults " * 1000
    s3.put_object(Bucket=name, Key="dir/object.bin", Body=body)
    got = s3.get_object(Bucket=name, Key="dir/object.bin")["Body"].read()
    assert sha256(got) == sha256(body)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "dir/object.bin"}, ExpiresIn=300)
    resp = requests.get(url, timeout=30)
    assert resp.status_code == 200, resp.text
    assert sha256(resp.content) == sha256(body)
    # A presigned URL for one key does not open another.
    other = url.replace("object.bin", "other.bin")
    assert requests.get(other, timeout=30).status_code == 403
