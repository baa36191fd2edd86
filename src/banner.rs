//! `talon up`'s banner: where each endpoint listens, the credentials, and commands to
//! try that read an object which exists (the sample's, or one of the user's own).

use std::path::Path;

use talon_origin_stub::{DEFAULT_AZURE_ACCOUNT, EMULATOR_AZURE_KEY};
use talon_protocols::access::AnonymousAccess;

use crate::{DEFAULT_DATA_DIR, Endpoints, UpArgs};

/// The object the banner's commands read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ExampleObject {
    pub bucket: String,
    pub key: String,
}

/// Most folder entries looked at while searching for an example: a user's folder may be
/// a large tree, and the banner must not walk it all.
const MAX_ENTRIES_SEEN: usize = 10_000;

/// The object the banner's commands read: the sample's `demo/hello.txt` when it is
/// there, else the first file (by name, depth first) in the first bucket folder of the
/// user's folder. Hidden entries (the workers' `.talon-cache`) and names that would need
/// quoting in a URL or a shell are skipped. `None` when no such object is found.
pub(crate) fn example_object(data_dir: &Path) -> Option<ExampleObject> {
    if data_dir.join("demo/hello.txt").is_file() {
        return Some(ExampleObject {
            bucket: "demo".into(),
            key: "hello.txt".into(),
        });
    }
    let mut seen = 0;
    for (bucket, path) in sorted_entries(data_dir, &mut seen) {
        if path.is_dir()
            && let Some(key) = first_file(&path, "", &mut seen)
        {
            return Some(ExampleObject { bucket, key });
        }
    }
    None
}

/// The first plain name-safe file under `dir`, as a key (`prefix` + its path).
fn first_file(dir: &Path, prefix: &str, seen: &mut usize) -> Option<String> {
    for (name, path) in sorted_entries(dir, seen) {
        let key = format!("{prefix}{name}");
        if path.is_file() {
            return Some(key);
        }
        if path.is_dir()
            && let Some(found) = first_file(&path, &format!("{key}/"), seen)
        {
            return Some(found);
        }
    }
    None
}

/// `dir`'s entries whose names are safe in a URL and a shell, sorted by name; counts
/// into `seen` and gives nothing more once it passes [`MAX_ENTRIES_SEEN`].
fn sorted_entries(dir: &Path, seen: &mut usize) -> Vec<(String, std::path::PathBuf)> {
    if *seen >= MAX_ENTRIES_SEEN {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut named: Vec<_> = entries
        .take(MAX_ENTRIES_SEEN - *seen)
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let safe = !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            safe.then(|| (name, e.path()))
        })
        .collect();
    *seen += named.len();
    named.sort();
    named
}

/// Prints where everything listens and commands to try; `example` is the object they
/// read (placeholders, and a line saying so, when there is none).
pub(crate) fn print_banner(
    e: &Endpoints,
    args: &UpArgs,
    credentials: (&str, &str),
    example: Option<&ExampleObject>,
) {
    crate::output::line(format_args!("{}", banner(e, args, credentials, example)));
}

/// The S3 secret as the banner shows it: the built-in development secret as it is
/// (it is public, like Azurite's key), any other never (the banner goes to terminals,
/// `nohup.out`, journald and CI logs; the red-team review's RT-09), with a placeholder
/// in the commands.
fn shown_secret(ak: &str, sk: &str) -> (&'static str, String) {
    if (ak, sk) == DEVELOPMENT_S3_CREDENTIALS {
        ("", sk.to_owned())
    } else {
        (
            " (not shown: put yours in place of SECRET)",
            "SECRET".to_owned(),
        )
    }
}

/// A duration as `--max-staleness` takes it: `1s`, `2m`, `1h`, `1500ms`.
fn shown_duration(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) && ms > 0 => format!("{}h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) && ms > 0 => format!("{}m", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// The built-in S3 key of `talon up`, public like Azurite's.
pub(crate) const DEVELOPMENT_S3_CREDENTIALS: (&str, &str) = ("talon", "talon");

/// [`print_banner`]'s text.
fn banner(
    e: &Endpoints,
    args: &UpArgs,
    (ak, sk): (&str, &str),
    example: Option<&ExampleObject>,
) -> String {
    let (not_shown, sk) = shown_secret(ak, sk);
    let azure_key = EMULATOR_AZURE_KEY;
    let (s3, azure, admin) = (&e.s3, &e.azure, &e.admin);
    let (bucket, key, try_it) = match example {
        Some(o) => (o.bucket.as_str(), o.key.as_str(), "Try it:".to_owned()),
        None if args.origin.is_some() => (
            "BUCKET",
            "KEY",
            format!("Try it (put a bucket and a key of {} in place of BUCKET and KEY):", e.origin),
        ),
        None => (
            "BUCKET",
            "KEY",
            "Try it (the folder has no object yet: its top-level folders are buckets, the files in them objects; put one in place of BUCKET and KEY):".to_owned(),
        ),
    };
    // With a certificate of the user's own (often self-signed), each line trusts it.
    let (curl_ca, aws_ca, boto_ca, azure_ca, azure_scheme) = match &args.tls_cert {
        Some(cert) => (
            format!(" --cacert {}", cert.display()),
            format!(" --ca-bundle {}", cert.display()),
            format!(", verify='{}'", cert.display()),
            format!(", connection_verify='{}'", cert.display()),
            "https",
        ),
        None => (
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            "http",
        ),
    };
    let curl = if args.anonymous == AnonymousAccess::Refused {
        format!(
            "curl -s{curl_ca} --aws-sigv4 aws:amz:{region}:s3 --user {ak}:{sk} -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' {s3}/{bucket}/{key}",
            region = args.region
        )
    } else {
        format!("curl -s{curl_ca} {s3}/{bucket}/{key}")
    };
    format!(
        r#"
Talon is up: {workers} behind a gateway, reading {origin}.

  S3          {s3}   region {region}, path-style
              access key {ak}, secret {sk}{not_shown} (signatures required)
  Azure Blob  {azure}
              account {DEFAULT_AZURE_ACCOUNT}, key {azure_key} (Shared Key or SAS required)
  Anonymous   {anonymous}
  Staleness   {staleness}: reads see changes made at the origin other than through
              this gateway within {staleness} (--max-staleness); writes through it at once
  Metrics     {admin}/metrics (gateway), {coordinator}/metrics (coordinator)
              {worker_metrics}
              cluster status page: {status}

{try_it}
  {curl}
  AWS_ACCESS_KEY_ID={ak} AWS_SECRET_ACCESS_KEY={sk} aws --endpoint-url {s3} --region {region}{aws_ca} s3 ls s3://{bucket} --recursive

  python3 -c "import boto3; s3 = boto3.client('s3', endpoint_url='{s3}', aws_access_key_id='{ak}', aws_secret_access_key='{sk}', region_name='{region}'{boto_ca}); print(s3.get_object(Bucket='{bucket}', Key='{key}')['Body'].read())"

  python3 -c "from azure.storage.blob import BlobServiceClient; c = BlobServiceClient.from_connection_string('DefaultEndpointsProtocol={azure_scheme};AccountName={DEFAULT_AZURE_ACCOUNT};AccountKey={azure_key};BlobEndpoint={azure};'{azure_ca}); print(c.get_blob_client('{bucket}', '{key}').download_blob().readall())"

  {warm}

Ctrl-C stops it.
"#,
        workers = match args.workers {
            1 => "1 worker".to_owned(),
            n => format!("{n} workers"),
        },
        origin = e.origin,
        coordinator = e.coordinator,
        worker_metrics = match e.workers.as_slice() {
            [] => "workers: off".to_owned(),
            urls => urls
                .iter()
                .enumerate()
                .map(|(i, url)| format!("{url}/metrics (w{i})"))
                .collect::<Vec<_>>()
                .join(", "),
        },
        staleness = shown_duration(args.max_staleness),
        status = if e.status.is_empty() {
            "off"
        } else {
            &e.status
        },
        region = args.region,
        warm = {
            // The tools find this deployment through its state file in the data folder.
            let at = if args.data_dir == Path::new(DEFAULT_DATA_DIR) {
                String::new()
            } else {
                format!(" --data-dir {}", args.data_dir.display())
            };
            format!(
                "talon warm s3://{bucket}/{at}   (fills the cache on the workers)\n  talon status{at}"
            )
        },
        anonymous = match args.anonymous {
            AnonymousAccess::Refused => "refused (--anonymous allows reads)",
            AnonymousAccess::ReadOnly => "reads allowed, writes refused",
            AnonymousAccess::ReadWrite => "reads and writes allowed",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_args(argv: &[&str]) -> UpArgs {
        use clap::Parser;
        let cli = crate::Cli::try_parse_from([&["talon", "up"], argv].concat()).expect("parses");
        match cli.command {
            crate::Command::Up(args) => args,
            _ => unreachable!("talon up"),
        }
    }

    fn endpoints() -> Endpoints {
        Endpoints {
            s3: "http://127.0.0.1:9000".into(),
            azure: "http://127.0.0.1:10000/devstoreaccount1".into(),
            admin: "http://127.0.0.1:9300".into(),
            coordinator: "http://127.0.0.1:9400".into(),
            status: "http://127.0.0.1:9301/".into(),
            workers: vec!["http://127.0.0.1:40001".into()],
            origin: "./talon-data".into(),
        }
    }

    /// RT-09: a secret given privately (`TALON_S3_CREDENTIALS`, `--s3-credentials`)
    /// appears nowhere in the banner; the public development one does.
    #[test]
    fn the_banner_shows_only_the_public_development_secret() {
        let hello = object("demo", "hello.txt");
        let own = banner(
            &endpoints(),
            &up_args(&["--s3-credentials", "AKRT:SKRT-private"]),
            ("AKRT", "SKRT-private"),
            hello.as_ref(),
        );
        assert!(!own.contains("SKRT"), "{own}");
        assert!(
            own.contains("access key AKRT, secret SECRET (not shown"),
            "{own}"
        );
        assert!(own.contains("--user AKRT:SECRET"), "{own}");
        let default = banner(
            &endpoints(),
            &up_args(&[]),
            DEVELOPMENT_S3_CREDENTIALS,
            hello.as_ref(),
        );
        assert!(
            default.contains("access key talon, secret talon (signatures required)"),
            "{default}"
        );
        assert!(default.contains("--user talon:talon"), "{default}");
    }

    #[test]
    fn the_banner_says_the_staleness_bound_in_force() {
        let hello = object("demo", "hello.txt");
        let text = |argv: &[&str]| {
            banner(
                &endpoints(),
                &up_args(argv),
                DEVELOPMENT_S3_CREDENTIALS,
                hello.as_ref(),
            )
        };
        assert!(text(&[]).contains("Staleness   1s:"), "{}", text(&[]));
        let long = text(&["--max-staleness", "5m"]);
        assert!(long.contains("Staleness   5m:"), "{long}");
        assert!(long.contains("within 5m (--max-staleness)"), "{long}");
        assert!(text(&["--max-staleness", "1500ms"]).contains("Staleness   1500ms:"));
    }

    /// The first-hour review's F9 and F14: the lines work as printed with --region and
    /// with a certificate of the user's own.
    #[test]
    fn the_lines_carry_the_region_and_trust_the_given_certificate() {
        let hello = object("demo", "hello.txt");
        let text = banner(
            &endpoints(),
            &up_args(&[
                "--region",
                "eu-west-1",
                "--tls-cert",
                "/etc/talon/cert.pem",
                "--tls-key",
                "/etc/talon/key.pem",
            ]),
            DEVELOPMENT_S3_CREDENTIALS,
            hello.as_ref(),
        );
        assert!(text.contains("region eu-west-1, path-style"), "{text}");
        assert!(
            text.contains("curl -s --cacert /etc/talon/cert.pem --aws-sigv4 aws:amz:eu-west-1:s3"),
            "{text}"
        );
        assert!(
            text.contains("--region eu-west-1 --ca-bundle /etc/talon/cert.pem s3 ls"),
            "{text}"
        );
        assert!(
            text.contains("DefaultEndpointsProtocol=https;")
                && text.contains(";', connection_verify='/etc/talon/cert.pem')"),
            "{text}"
        );
        assert!(
            text.contains("region_name='eu-west-1', verify='/etc/talon/cert.pem')"),
            "{text}"
        );
        let plain = banner(
            &endpoints(),
            &up_args(&[]),
            DEVELOPMENT_S3_CREDENTIALS,
            hello.as_ref(),
        );
        assert!(
            !plain.contains("--cacert") && !plain.contains("verify="),
            "{plain}"
        );
    }

    fn object(bucket: &str, key: &str) -> Option<ExampleObject> {
        Some(ExampleObject {
            bucket: bucket.into(),
            key: key.into(),
        })
    }

    #[test]
    fn the_sample_names_its_hello_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("aaa")).expect("mkdir");
        std::fs::write(dir.path().join("aaa/first.txt"), "x").expect("write");
        std::fs::create_dir_all(dir.path().join("demo")).expect("mkdir");
        std::fs::write(dir.path().join("demo/hello.txt"), "x").expect("write");
        assert_eq!(example_object(dir.path()), object("demo", "hello.txt"));
    }

    #[test]
    fn a_users_folder_names_its_first_safe_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for folder in [
            ".talon-cache/w0",
            "b-empty",
            "c-data/2024/a b",
            "c-data/2024/m",
            "d",
        ] {
            std::fs::create_dir_all(root.join(folder)).expect("mkdir");
        }
        // Loose files at the top are not in a bucket; hidden and unsafe names are skipped.
        for file in [
            "top.txt",
            ".talon-cache/w0/block",
            "c-data/.hidden",
            "c-data/2024/a b/x.bin",
            "c-data/2024/it's.bin",
            "c-data/2024/m/part-0.parquet",
            "d/z.txt",
        ] {
            std::fs::write(root.join(file), "x").expect("write");
        }
        assert_eq!(
            example_object(root),
            object("c-data", "2024/m/part-0.parquet")
        );
    }

    #[test]
    fn a_folder_without_objects_names_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("loose.txt"), "x").expect("write");
        std::fs::create_dir_all(dir.path().join("empty/deeper")).expect("mkdir");
        assert_eq!(example_object(dir.path()), None);
        assert_eq!(example_object(&dir.path().join("missing")), None);
    }
}
