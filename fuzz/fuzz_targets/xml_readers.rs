//! Every XML document Talon reads from a peer: S3 DeleteObjects and
//! CompleteMultipartUpload bodies, Azure block lists, and the listings and error documents
//! an origin answers with. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use talon_protocols::{azure, s3};

fuzz_target!(|data: &[u8]| {
    let _ = s3::xml::parse_request::<s3::xml::DeleteRequest>(data);
    let _ = s3::xml::parse_request::<s3::xml::CompleteMultipartUpload>(data);
    let _ = s3::xml::parse_request::<s3::xml::ListBucketResult>(data);
    let _ = s3::xml::parse_request::<s3::xml::ListAllMyBucketsResult>(data);
    let _ = s3::xml::parse_request::<s3::xml::ErrorBody>(data);
    let _ = azure::xml::parse_request::<azure::xml::BlockListRequest>(data);
    let _ = azure::xml::parse_request::<azure::xml::EnumerationResults>(data);
    let _ = azure::xml::parse_request::<azure::xml::ContainerEnumeration>(data);
});
