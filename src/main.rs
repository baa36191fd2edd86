//! `talon`: the one binary a newcomer runs. `talon up` starts a whole local deployment
//! in one process on loopback.
//!
//! Today that deployment is the origin stub serving a local folder through S3 and Azure
//! Blob endpoints; the coordinator, workers and gateway join it as their crates land, and
//! the endpoints printed here then become the gateway's.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{DEFAULT_AZURE_ACCOUNT, EMULATOR_AZURE_KEY, StubConfig};
use talon_protocols::azure::shared_key::AccountKey;

/// Talon: a distributed read-through cache for object stores.
#[derive(Debug, Parser)]
#[command(name = "talon", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a whole local deployment on loopback, serving a folder through S3 and Azure Blob.
    Up(UpArgs),
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Folder to serve; its top-level folders are buckets (containers). Created with a
    /// small sample when it does not exist.
    #[arg(long, env = "TALON_DATA_DIR", default_value = "talon-data")]
    data_dir: PathBuf,

    /// Address to bind every endpoint on.
    #[arg(long, env = "TALON_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,

    /// S3 endpoint port.
    #[arg(long, env = "TALON_S3_PORT", default_value_t = 9000)]
    s3_port: u16,

    /// Azure Blob endpoint port.
    #[arg(long, env = "TALON_AZURE_PORT", default_value_t = 10000)]
    azure_port: u16,

    /// Admin port (/metrics, /healthz, /admin/faults).
    #[arg(long, env = "TALON_ADMIN_PORT", default_value_t = 9100)]
    admin_port: u16,

    /// Require S3 requests signed with this ACCESS_KEY:SECRET (default: any credentials
    /// are accepted and signatures are not checked).
    #[arg(long, env = "TALON_S3_CREDENTIALS")]
    s3_credentials: Option<String>,

    /// Require Azure Shared Key or SAS with the emulator's well-known account key
    /// (default: anonymous access).
    #[arg(long, env = "TALON_AZURE_REQUIRE_KEY")]
    azure_require_key: bool,
}

/// Writes the sample data set into a new folder.
fn write_sample(dir: &Path) -> anyhow::Result<()> {
    let demo = dir.join("demo");
    std::fs::create_dir_all(demo.join("tables"))
        .with_context(|| format!("creating {}", demo.display()))?;
    std::fs::write(
        demo.join("hello.txt"),
        "Hello from Talon. This file lives in the 'demo' bucket of your data folder.\n",
    )?;
    let mut csv = String::from("id,square,cube\n");
    for i in 0..1000u64 {
        csv.push_str(&format!("{i},{},{}\n", i * i, i * i * i));
    }
    std::fs::write(demo.join("tables/numbers.csv"), csv)?;
    Ok(())
}

fn print_banner(
    stub: &talon_origin_stub::RunningStub,
    args: &UpArgs,
    credentials: Option<(&str, &str)>,
) {
    let s3 = stub.s3_url().unwrap_or_default();
    let azure = stub.azure_url().unwrap_or_default();
    let admin = stub.admin_url().unwrap_or_default();
    let (ak, sk) = credentials.unwrap_or(("talon", "talon"));
    let azure_key = EMULATOR_AZURE_KEY;
    println!(
        r#"
Talon is up (origin stub: the cache cluster and gateway join this command as they land).

  S3          {s3}   region us-east-1, path-style
              credentials: {creds}
  Azure Blob  {azure}
              account {DEFAULT_AZURE_ACCOUNT}, key {azure_key}{azure_auth}
  Admin       {admin}/metrics   {admin}/admin/faults
  Data        {data}  (buckets are its top-level folders; 'demo/random-64MiB.bin' is generated)

Try it:
  curl -s {s3}/demo/hello.txt
  AWS_ACCESS_KEY_ID={ak} AWS_SECRET_ACCESS_KEY={sk} aws --endpoint-url {s3} s3 ls s3://demo --recursive

  python3 -c "import boto3; s3 = boto3.client('s3', endpoint_url='{s3}', aws_access_key_id='{ak}', aws_secret_access_key='{sk}', region_name='us-east-1'); print(s3.get_object(Bucket='demo', Key='hello.txt')['Body'].read())"

  python3 -c "from azure.storage.blob import BlobServiceClient; c = BlobServiceClient.from_connection_string('DefaultEndpointsProtocol=http;AccountName={DEFAULT_AZURE_ACCOUNT};AccountKey={azure_key};BlobEndpoint={azure};'); print(c.get_blob_client('demo', 'hello.txt').download_blob().readall())"

Ctrl-C stops it.
"#,
        creds = if credentials.is_some() {
            format!("access key {ak}, secret {sk} (required)")
        } else {
            "any (signatures not checked)".to_owned()
        },
        azure_auth = if args.azure_require_key {
            " (required)"
        } else {
            " (optional: anonymous access allowed)"
        },
        data = args.data_dir.display(),
    );
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    if !args.data_dir.exists() {
        write_sample(&args.data_dir)?;
        tracing::info!(dir = %args.data_dir.display(), "created the data folder with a sample");
    }
    let credentials = match &args.s3_credentials {
        Some(c) => Some(
            c.split_once(':')
                .filter(|(a, s)| !a.is_empty() && !s.is_empty())
                .with_context(|| format!("--s3-credentials '{c}' is not ACCESS_KEY:SECRET"))?,
        ),
        None => None,
    };
    let mut s3_credentials = BTreeMap::new();
    if let Some((ak, sk)) = credentials {
        s3_credentials.insert(ak.to_owned(), sk.to_owned());
    }
    let azure_key = if args.azure_require_key {
        Some(
            AccountKey::from_base64(EMULATOR_AZURE_KEY)
                .map_err(|e| anyhow::anyhow!("the emulator key: {}", e.message()))?,
        )
    } else {
        None
    };
    let config = StubConfig {
        data_dir: Some(args.data_dir.clone()),
        generated: vec![GeneratedObject::new(
            "demo",
            "random-64MiB.bin",
            64 << 20,
            0,
        )],
        s3_listen: Some(SocketAddr::new(args.bind, args.s3_port)),
        azure_listen: Some(SocketAddr::new(args.bind, args.azure_port)),
        admin_listen: Some(SocketAddr::new(args.bind, args.admin_port)),
        s3_credentials,
        azure_key,
        ..StubConfig::default()
    };
    let stub = talon_origin_stub::start(config)
        .await
        .context("starting the origin stub")?;
    print_banner(&stub, &args, credentials);
    talon_origin_stub::server::shutdown_signal().await;
    tracing::info!("shutting down");
    stub.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TALON_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up(args) => up(args).await,
    }
}
