//! The stub's object store: a folder on disk (top-level folders are buckets, files are
//! objects) overlaid on deterministic generated objects, with multipart uploads and
//! Azure uncommitted blocks kept beside it. It stores every key S3 accepts.
//!
//! Layout under the data folder:
//!
//! ```text
//! <bucket>/<key>                         object bytes, exactly as uploaded, when a file can have the key's path
//! .talon-stub/keyed/<bucket>/<sha256(key)>       object bytes of every other key
//! .talon-stub/meta/<bucket>/<sha256(key)>.json   metadata of objects written through the stub (and their key)
//! .talon-stub/tmp/                       uploads in progress (renamed into place when complete)
//! .talon-stub/uploads/<upload id>/       S3 multipart parts
//! .talon-stub/blocks/<sha256(bucket/key)>/  Azure uncommitted blocks
//! ```
//!
//! **Which keys are files.** S3's namespace is flat: `a` and `a/b` may both exist, keys
//! may end in `/` (folder markers, as the AWS console, rclone and Hadoop's S3A write them)
//! or hold `.`/`..` and empty segments. A key is kept as the file `<bucket>/<key>` when
//! every segment is a file name (non-empty, not `.` or `..`, at most 255 bytes) and the
//! path is free of a conflicting object (no file where a folder is needed, no folder
//! where the file goes); otherwise its bytes are kept under the key's SHA-256 in
//! `keyed/` and its key in its metadata record. A key kept there stays there until it is
//! deleted, so a key has one home at a time. Files put into the bucket folders by hand
//! are objects; a keyed object wins over a hand-made file of the same key.
//!
//! **Crash safety.** An object becomes visible only by the rename of a complete,
//! `fsync`ed file, and the folders it was renamed in are synced after; so a reader, or a
//! restart after a crash at any point, sees the old version or the new one, never a torn
//! one, and a reader that opened the old file keeps reading the old bytes. Metadata is
//! published before the bytes and names the file it describes (size, mtime, inode): cut
//! short between the two, the old bytes keep derived metadata (a fresh ETag) rather than
//! the new version's, and a new keyed object with no bytes yet is not listed. Staging
//! files left by a crash are removed when the next process opens the folder (it holds a
//! lock on `.talon-stub/lock`, so a second process on the same folder leaves them).
//! All methods block; call them off the reactor.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest as _, Md5};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use talon_protocols::checksum::ChecksumAlgorithm;
use talon_protocols::conditional::normalize_etag;
use talon_protocols::listing::{ListPage, ListQuery, paginate};
use talon_protocols::multipart::check_completion;
use talon_protocols::names::check_block_id;
use talon_protocols::{Error, ErrorKind, Result};

use crate::generated::GeneratedObject;

/// Longest object key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

const STUB_DIR: &str = ".talon-stub";

/// Everything a client can learn about an object without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Quoted entity tag, identical for both protocols.
    pub etag: String,
    /// Last modification time.
    pub last_modified: SystemTime,
    /// Content type.
    pub content_type: String,
    /// User metadata, lower-case names without the protocol prefix.
    pub user_metadata: BTreeMap<String, String>,
    /// Content headers recorded at write, by lower-case standard name (one of
    /// [`CONTENT_HEADERS`](talon_protocols::content_headers::CONTENT_HEADERS)).
    pub content_headers: BTreeMap<String, String>,
    /// Full-object flexible checksum recorded at upload.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
    /// Base64 MD5 of the content, when known (single uploads).
    pub content_md5: Option<String>,
    /// Part sizes of a multipart object, in order.
    pub parts: Vec<u64>,
    /// Committed Azure blocks (id, size), in order.
    pub blocks: Vec<(String, u64)>,
}

/// Where an object's bytes come from.
#[derive(Debug)]
pub enum ObjectBody {
    /// An open file (the version that was current when it was opened).
    File(File),
    /// Generated content.
    Generated(GeneratedObject),
}

/// An object opened for reading: metadata and bytes of the same version.
#[derive(Debug)]
pub struct OpenObject {
    /// Metadata.
    pub meta: ObjectMeta,
    /// Bytes.
    pub body: ObjectBody,
}

/// Metadata a client supplies with a write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOptions {
    /// Content type, when given.
    pub content_type: Option<String>,
    /// User metadata.
    pub user_metadata: BTreeMap<String, String>,
    /// Content headers, by lower-case standard name.
    #[serde(default)]
    pub content_headers: BTreeMap<String, String>,
    /// Full-object checksum, when the client sent (and the stub verified) one.
    pub checksum: Option<(ChecksumAlgorithm, String)>,
}

/// What a write records about the object it creates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewObject {
    /// Quoted entity tag.
    pub etag: String,
    /// Base64 MD5 of the content, when known.
    pub content_md5: Option<String>,
    /// Client-supplied metadata.
    pub options: WriteOptions,
    /// Part sizes, for a multipart object.
    pub parts: Vec<u64>,
    /// Committed Azure blocks, for a block-list blob.
    pub blocks: Vec<(String, u64)>,
}

/// What the stub stores beside an object written through it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Sidecar {
    /// The key, which a keyed object's file name (a hash) cannot tell.
    #[serde(default)]
    key: Option<String>,
    etag: String,
    content_type: Option<String>,
    user_metadata: BTreeMap<String, String>,
    #[serde(default)]
    content_headers: BTreeMap<String, String>,
    checksum: Option<(ChecksumAlgorithm, String)>,
    content_md5: Option<String>,
    #[serde(default)]
    parts: Vec<u64>,
    #[serde(default)]
    blocks: Vec<(String, u64)>,
    // The identity of the file this describes.
    size: u64,
    mtime_ns: i128,
    ino: u64,
}

/// A bucket and when it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInfo {
    /// Name.
    pub name: String,
    /// Creation (or folder modification) time.
    pub created: SystemTime,
}

/// A file being written in the staging folder; removed on drop unless published.
#[derive(Debug)]
pub struct StagedFile {
    path: PathBuf,
    file: Option<File>,
}

impl StagedFile {
    /// The file to write into.
    pub fn file(&mut self) -> io::Result<&mut File> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("staged file already taken"))
    }

    /// Takes the file out for async writing; give it back with [`StagedFile::restore`].
    pub fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    /// Puts the file back after async writing.
    pub fn restore(&mut self, file: File) {
        self.file = Some(file);
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// An S3 multipart upload in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UploadInfo {
    bucket: String,
    key: String,
    options: WriteOptions,
    initiated_ms: u64,
}

/// The record a completed upload leaves (`completed.json` in its folder), for a
/// repeated completion.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CompletedUpload {
    /// The object's quoted ETag.
    etag: String,
    /// The parts it was completed with (number, quoted ETag).
    parts: Vec<(u32, String)>,
}

const COMPLETED: &str = "completed.json";

/// A stored multipart part.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartInfo {
    /// Part number.
    pub number: u32,
    /// Quoted MD5 entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Upload time, ms since the epoch.
    pub uploaded_ms: u64,
}

/// A summary of an upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSummary {
    /// Key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// Creation time.
    pub initiated: SystemTime,
}

/// Azure block ids with their sizes, in order.
pub type BlockIds = Vec<(String, u64)>;

/// One entry of an Azure Put Block List: which version of the block to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockChoice {
    /// Uncommitted if present, else committed.
    Latest(String),
    /// The committed version.
    Committed(String),
    /// The uncommitted version.
    Uncommitted(String),
}

/// The object store.
#[derive(Debug)]
pub struct ObjectStore {
    root: PathBuf,
    generated: Mutex<BTreeMap<(String, String), GeneratedObject>>,
    /// Guards the namespace: publishing or deleting an object (data, metadata and
    /// folders together) holds it exclusively; opening an object (data plus its
    /// metadata) and listing hold it shared. So a reader always sees one version's bytes
    /// with that version's metadata, and folders are never removed under a publish.
    namespace: RwLock<()>,
    /// The lock on `.talon-stub/lock`, held for the store's life when this process got it.
    _owner: Option<File>,
}

fn internal(context: &str, err: io::Error) -> Error {
    Error::new(ErrorKind::InternalError, format!("{context}: {err}")).with_source(err)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One entry of a listing: an object written to the store, or a generated one.
enum Merged<'a> {
    Stored(&'a ObjectMeta),
    Generated(&'a GeneratedObject),
}

/// The written and the generated objects of a listing merged in key order (each source
/// sorted by key); where both hold a key, the written object is the one that exists.
fn merge_by_key<'a>(
    stored: impl Iterator<Item = (&'a String, &'a ObjectMeta)>,
    generated: impl Iterator<Item = (&'a str, &'a GeneratedObject)>,
) -> impl Iterator<Item = Merged<'a>> {
    let (mut stored, mut generated) = (stored.peekable(), generated.peekable());
    std::iter::from_fn(move || {
        let order = match (stored.peek(), generated.peek()) {
            (None, None) => return None,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((s, _)), Some((g, _))) => s.as_str().cmp(g),
        };
        if order == std::cmp::Ordering::Equal {
            generated.next();
        }
        if order == std::cmp::Ordering::Greater {
            generated.next().map(|(_, g)| Merged::Generated(g))
        } else {
            stored.next().map(|(_, m)| Merged::Stored(m))
        }
    })
}

fn no_such_key(key: &str) -> Error {
    Error::new(
        ErrorKind::NoSuchKey,
        format!("The specified key does not exist: {key}"),
    )
}

fn no_such_bucket(bucket: &str) -> Error {
    Error::new(
        ErrorKind::NoSuchBucket,
        format!("The specified bucket does not exist: {bucket}"),
    )
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Checks that S3 accepts a key, which the store can then keep: non-empty, at most
/// 1,024 bytes, no NUL (which no XML listing could carry).
///
/// # Errors
/// [`ErrorKind::InvalidObjectName`].
pub fn check_key(key: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::new(
            ErrorKind::InvalidObjectName,
            format!("key '{}' {why}", key.escape_debug()),
        ))
    };
    if key.is_empty() {
        return bad("is empty");
    }
    if key.len() > MAX_KEY_LEN {
        return bad("is longer than 1024 bytes");
    }
    if key.contains('\0') {
        return bad("contains NUL");
    }
    Ok(())
}

/// Whether every segment of a key is a file name: non-empty, not `.` or `..`, at most
/// 255 bytes. Only such a key can be the path of a file in its bucket's folder.
fn is_a_file_path(key: &str) -> bool {
    !key.contains('\0')
        && key
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != ".." && seg.len() <= 255)
}

/// Renames a staged file, whose bytes the caller has synced, to `target`, then syncs
/// the folder the name was added to: after this returns, a crash keeps the file whole
/// under its new name.
fn publish(staged: &Path, target: &Path) -> io::Result<()> {
    fs::rename(staged, target)?;
    sync_folder_of(target)
}

/// Opens the regular file at `path`; `None` when there is none (nothing, a folder, a
/// symbolic link, or a special file). Opened without following a link and without
/// blocking, then checked: a FIFO in the folder must not hang the opener (and every
/// request queued behind its lock).
fn open_regular_file(path: &Path) -> Result<Option<(File, fs::Metadata)>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    match opened {
        Ok(file) => {
            let meta = file
                .metadata()
                .map_err(|e| internal("reading object metadata", e))?;
            Ok(meta.is_file().then_some((file, meta)))
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) || e.raw_os_error() == Some(libc::ELOOP) =>
        {
            Ok(None)
        }
        Err(e) => Err(internal("opening the object", e)),
    }
}

/// Removes `dir` and every folder under it that holds nothing else but empty folders,
/// never a file, link or special file, nor anything through a link; whether `dir`
/// itself went.
fn remove_empty_folders(dir: &Path) -> io::Result<bool> {
    let mut empty = true;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            empty &= remove_empty_folders(&entry.path())?;
        } else {
            empty = false;
        }
    }
    if empty {
        fs::remove_dir(dir)?;
    }
    Ok(empty)
}

/// Removes the regular file at `path` and syncs its folder; whether there was one.
fn remove_regular_file(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => {
            fs::remove_file(path)?;
            sync_folder_of(path)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Syncs the folder holding `path`, so that a rename into it or a removal from it
/// survives a crash.
fn sync_folder_of(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

fn check_bucket(bucket: &str) -> Result<()> {
    if bucket.is_empty()
        || bucket.starts_with('.')
        || bucket.contains(['/', '\0'])
        || bucket.len() > 255
    {
        return Err(Error::new(
            ErrorKind::InvalidBucketName,
            format!("The specified bucket '{bucket}' is not valid."),
        ));
    }
    Ok(())
}

fn mtime_ns(meta: &fs::Metadata) -> i128 {
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

fn system_time(meta: &fs::Metadata) -> SystemTime {
    meta.modified().unwrap_or(UNIX_EPOCH)
}

impl ObjectStore {
    /// Opens (creating if needed) a store rooted at `root`, with generated objects.
    ///
    /// # Errors
    /// I/O errors creating the stub's folders.
    pub fn new(root: &Path, generated: Vec<GeneratedObject>) -> io::Result<ObjectStore> {
        for sub in ["tmp", "meta", "keyed", "uploads", "blocks"] {
            fs::create_dir_all(root.join(STUB_DIR).join(sub))?;
        }
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join(STUB_DIR).join("lock"))?;
        let owner = match lock.try_lock() {
            Ok(()) => {
                // No other process uses this folder: staging files are a crash's leftovers,
                // and the records of completed uploads are no longer needed.
                for entry in fs::read_dir(root.join(STUB_DIR).join("tmp"))?.flatten() {
                    let _ = fs::remove_file(entry.path());
                }
                for entry in fs::read_dir(root.join(STUB_DIR).join("uploads"))?.flatten() {
                    if entry.path().join(COMPLETED).exists() {
                        let _ = fs::remove_dir_all(entry.path());
                    }
                }
                Some(lock)
            }
            Err(_) => None,
        };
        let generated = generated
            .into_iter()
            .map(|g| ((g.bucket.clone(), g.key.clone()), g))
            .collect();
        Ok(ObjectStore {
            root: root.to_owned(),
            generated: Mutex::new(generated),
            namespace: RwLock::new(()),
            _owner: owner,
        })
    }

    /// The data folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn stub_dir(&self, sub: &str) -> PathBuf {
        self.root.join(STUB_DIR).join(sub)
    }

    fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.root.join(bucket)
    }

    /// The file a key names in its bucket's folder, when a file can have its path: its
    /// segments are file names, and no folder on the way is a symbolic link (the stub
    /// neither reads, writes nor deletes through links inside a bucket; such a key is
    /// kept under its hash instead).
    fn file_path(&self, bucket: &str, key: &str) -> Option<PathBuf> {
        if !is_a_file_path(key) {
            return None;
        }
        let mut path = self.root.join(bucket);
        let mut segments = key.split('/').peekable();
        while let Some(segment) = segments.next() {
            path.push(segment);
            if segments.peek().is_some()
                && fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink())
            {
                return None;
            }
        }
        Some(path)
    }

    /// Where a key's bytes are kept when a file cannot have its path.
    fn keyed_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.stub_dir("keyed").join(bucket).join(sha256_hex(key))
    }

    fn sidecar_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.sidecar_path_of_hash(bucket, &sha256_hex(key))
    }

    fn sidecar_path_of_hash(&self, bucket: &str, key_hash: &str) -> PathBuf {
        self.stub_dir("meta")
            .join(bucket)
            .join(format!("{key_hash}.json"))
    }

    /// The metadata record stored under a key's hash, if any can be read.
    fn sidecar_of_hash(&self, bucket: &str, key_hash: &str) -> Option<Sidecar> {
        fs::read(self.sidecar_path_of_hash(bucket, key_hash))
            .ok()
            .and_then(|b| serde_json::from_slice::<Sidecar>(&b).ok())
    }

    fn read_namespace(&self) -> RwLockReadGuard<'_, ()> {
        self.namespace.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_namespace(&self) -> RwLockWriteGuard<'_, ()> {
        self.namespace.write().unwrap_or_else(|p| p.into_inner())
    }

    fn generated_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), GeneratedObject>> {
        self.generated.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn generated_get(&self, bucket: &str, key: &str) -> Option<GeneratedObject> {
        self.generated_lock()
            .get(&(bucket.to_owned(), key.to_owned()))
            .cloned()
    }

    fn has_generated_in(&self, bucket: &str) -> bool {
        self.generated_lock()
            .range((bucket.to_owned(), String::new())..)
            .next()
            .is_some_and(|((b, _), _)| b == bucket)
    }

    /// Whether a bucket exists (a folder, or generated objects in it).
    pub fn bucket_exists(&self, bucket: &str) -> bool {
        check_bucket(bucket).is_ok()
            && (self.bucket_dir(bucket).is_dir() || self.has_generated_in(bucket))
    }

    fn require_bucket(&self, bucket: &str) -> Result<()> {
        if self.bucket_exists(bucket) {
            Ok(())
        } else {
            Err(no_such_bucket(bucket))
        }
    }

    /// Lists buckets by name.
    ///
    /// # Errors
    /// I/O errors reading the data folder.
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let mut out: BTreeMap<String, SystemTime> = BTreeMap::new();
        for entry in fs::read_dir(&self.root).map_err(|e| internal("reading the data folder", e))? {
            let entry = entry.map_err(|e| internal("reading the data folder", e))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if check_bucket(&name).is_err() {
                continue;
            }
            if let Ok(meta) = fs::metadata(entry.path())
                && meta.is_dir()
            {
                out.insert(name, system_time(&meta));
            }
        }
        // One look per bucket of generated objects: from each bucket's first key, the
        // next is the first key past every key of it.
        let generated = self.generated_lock();
        let mut from = (String::new(), String::new());
        while let Some(((bucket, _), g)) = generated.range(from..).next() {
            out.entry(bucket.clone())
                .or_insert_with(|| g.last_modified());
            from = (format!("{bucket}\0"), String::new());
        }
        Ok(out
            .into_iter()
            .map(|(name, created)| BucketInfo { name, created })
            .collect())
    }

    /// Bucket creation time.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`].
    pub fn bucket_info(&self, bucket: &str) -> Result<BucketInfo> {
        self.require_bucket(bucket)?;
        let created = fs::metadata(self.bucket_dir(bucket))
            .map(|m| system_time(&m))
            .unwrap_or_else(|_| UNIX_EPOCH + Duration::from_secs(1_735_689_600));
        Ok(BucketInfo {
            name: bucket.to_owned(),
            created,
        })
    }

    /// Creates a bucket folder.
    ///
    /// # Errors
    /// [`ErrorKind::BucketAlreadyExists`], [`ErrorKind::InvalidBucketName`].
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        check_bucket(bucket)?;
        if self.bucket_exists(bucket) {
            return Err(Error::new(
                ErrorKind::BucketAlreadyExists,
                format!("The bucket '{bucket}' already exists."),
            ));
        }
        fs::create_dir_all(self.bucket_dir(bucket))
            .map_err(|e| internal("creating the bucket folder", e))
    }

    /// Deletes an empty bucket.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::BucketNotEmpty`].
    pub fn delete_bucket(&self, bucket: &str) -> Result<()> {
        self.require_bucket(bucket)?;
        let _guard = self.write_namespace();
        let first = ListQuery {
            max_keys: 1,
            ..ListQuery::default()
        };
        if !self.list_page_locked(bucket, &first)?.entries.is_empty() {
            return Err(Error::new(
                ErrorKind::BucketNotEmpty,
                format!("The bucket '{bucket}' is not empty."),
            ));
        }
        // Only empty folders go: anything the listing cannot show (a name that is not
        // UTF-8, a path longer than a key, a special file, a link) stays, and then the
        // bucket is not empty.
        let dir = self.bucket_dir(bucket);
        if dir.exists()
            && !remove_empty_folders(&dir).map_err(|e| internal("removing the bucket folder", e))?
        {
            return Err(Error::new(
                ErrorKind::BucketNotEmpty,
                format!(
                    "The bucket '{bucket}' is not empty: its folder holds files that are no \
                     objects (names that are not UTF-8, paths longer than a key, special \
                     files or links)."
                ),
            ));
        }
        let _ = fs::remove_dir_all(self.stub_dir("keyed").join(bucket));
        let _ = fs::remove_dir_all(self.stub_dir("meta").join(bucket));
        Ok(())
    }

    /// Metadata of a stored file, from its sidecar when the sidecar describes this very
    /// file, else derived from the file itself.
    fn file_meta(&self, bucket: &str, key: &str, meta: &fs::Metadata) -> ObjectMeta {
        let sidecar = self
            .sidecar_of_hash(bucket, &sha256_hex(key))
            .filter(|s| s.key.as_deref().is_none_or(|k| k == key));
        described(key, meta, sidecar)
    }

    /// Where a write of `key` puts its bytes: its keyed home when it has one already or
    /// no file can have its path, else the file of its path (creating the folders the
    /// path needs). Call with the namespace held exclusively.
    fn home_for_write(&self, bucket: &str, key: &str) -> Result<PathBuf> {
        let keyed = self.keyed_path(bucket, key);
        if !keyed.exists()
            && let Some(path) = self.file_path(bucket, key)
            && path.parent().is_none_or(|p| fs::create_dir_all(p).is_ok())
            && !path.is_dir()
        {
            return Ok(path);
        }
        if let Some(dir) = keyed.parent() {
            fs::create_dir_all(dir).map_err(|e| internal("creating the keyed folder", e))?;
        }
        Ok(keyed)
    }

    fn generated_meta(g: &GeneratedObject) -> ObjectMeta {
        ObjectMeta {
            key: g.key.clone(),
            size: g.size,
            etag: g.etag(),
            last_modified: g.last_modified(),
            content_type: "application/octet-stream".to_owned(),
            user_metadata: BTreeMap::new(),
            content_headers: BTreeMap::new(),
            checksum: None,
            content_md5: None,
            parts: Vec::new(),
            blocks: Vec::new(),
        }
    }
    /// An object's metadata.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::NoSuchKey`].
    pub fn head(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        Ok(self.open(bucket, key)?.meta)
    }

    /// Opens an object for reading.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::NoSuchKey`].
    pub fn open(&self, bucket: &str, key: &str) -> Result<OpenObject> {
        self.require_bucket(bucket)?;
        if check_key(key).is_err() {
            return Err(no_such_key(key));
        }
        let guard = self.read_namespace();
        let homes = [
            Some(self.keyed_path(bucket, key)),
            self.file_path(bucket, key),
        ];
        for path in homes.into_iter().flatten() {
            if let Some((file, meta)) = open_regular_file(&path)? {
                let meta = self.file_meta(bucket, key, &meta);
                drop(guard);
                return Ok(OpenObject {
                    meta,
                    body: ObjectBody::File(file),
                });
            }
        }
        drop(guard);
        match self.generated_get(bucket, key) {
            Some(g) => Ok(OpenObject {
                meta: Self::generated_meta(&g),
                body: ObjectBody::Generated(g),
            }),
            None => Err(no_such_key(key)),
        }
    }

    /// All objects of a bucket, sorted by key (UTF-8 byte order).
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`]; I/O errors.
    pub fn list(&self, bucket: &str) -> Result<Vec<ObjectMeta>> {
        let whole = ListQuery {
            max_keys: usize::MAX,
            ..ListQuery::default()
        };
        Ok(self.list_page(bucket, &whole)?.entries)
    }

    /// One page of a bucket's listing, as `query` asks (prefix, delimiter, marker, page
    /// size). Generated objects are read from the page's first key on and no further than
    /// the page needs, so a set of millions lists a page in the time of a thousand;
    /// objects written to the folder are few and walked whole.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`]; I/O errors.
    pub fn list_page(&self, bucket: &str, query: &ListQuery<'_>) -> Result<ListPage<ObjectMeta>> {
        self.require_bucket(bucket)?;
        let _guard = self.read_namespace();
        self.list_page_locked(bucket, query)
    }

    /// [`ObjectStore::list_page`] for a caller that holds the namespace lock.
    fn list_page_locked(
        &self,
        bucket: &str,
        query: &ListQuery<'_>,
    ) -> Result<ListPage<ObjectMeta>> {
        let stored = self.stored_objects(bucket)?;
        // Keys at or after both the prefix and the marker; the keys with the prefix are
        // one run in key order, so each source stops at its first key without it.
        let from = query
            .marker
            .filter(|m| *m > query.prefix)
            .unwrap_or(query.prefix);
        let prefix = query.prefix;
        let generated = self.generated_lock();
        let generated = generated
            .range((bucket.to_owned(), from.to_owned())..)
            .take_while(|((b, k), _)| b == bucket && k.starts_with(prefix))
            .map(|((_, k), g)| (k.as_str(), g));
        let stored = stored
            .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        let merged = merge_by_key(stored, generated).map(|entry| match entry {
            Merged::Stored(meta) => meta.clone(),
            Merged::Generated(g) => Self::generated_meta(g),
        });
        Ok(paginate(merged, |m| m.key.as_str(), query))
    }

    /// The objects written to a bucket (its folder's files and the keyed objects), by key.
    fn stored_objects(&self, bucket: &str) -> Result<BTreeMap<String, ObjectMeta>> {
        let mut out: BTreeMap<String, ObjectMeta> = BTreeMap::new();
        let dir = self.bucket_dir(bucket);
        if dir.is_dir() {
            let mut stack = vec![(dir, String::new())];
            while let Some((dir, prefix)) = stack.pop() {
                let entries =
                    fs::read_dir(&dir).map_err(|e| internal("listing the bucket folder", e))?;
                for entry in entries.flatten() {
                    let Ok(name) = entry.file_name().into_string() else {
                        continue;
                    };
                    let key = if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    };
                    // The entry itself, links not followed: a link is no object and
                    // no folder to walk (two `x -> .` would make the walk endless).
                    let Ok(meta) = entry.metadata() else {
                        continue;
                    };
                    if meta.is_dir() {
                        stack.push((entry.path(), key));
                    } else if meta.is_file() && check_key(&key).is_ok() {
                        let m = self.file_meta(bucket, &key, &meta);
                        out.insert(key, m);
                    }
                }
            }
        }
        // Keyed objects: the key is in the metadata record; bytes without a record naming
        // their hash's key (a publish cut short) are not an object yet.
        if let Ok(entries) = fs::read_dir(self.stub_dir("keyed").join(bucket)) {
            for entry in entries.flatten() {
                let (Ok(meta), Some(hash)) = (
                    entry.metadata(),
                    entry.file_name().to_str().map(str::to_owned),
                ) else {
                    continue;
                };
                let Some(sidecar) = self.sidecar_of_hash(bucket, &hash) else {
                    continue;
                };
                let Some(key) = sidecar.key.clone().filter(|k| sha256_hex(k) == hash) else {
                    continue;
                };
                if meta.is_file() {
                    let m = described(&key, &meta, Some(sidecar));
                    out.insert(key, m);
                }
            }
        }
        Ok(out)
    }

    /// Creates an empty staging file for a write.
    ///
    /// # Errors
    /// I/O errors.
    pub fn stage(&self) -> Result<StagedFile> {
        let path = self.stub_dir("tmp").join(format!(
            "{:016x}{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        ));
        let file = fs::OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| internal("creating a staging file", e))?;
        Ok(StagedFile {
            path,
            file: Some(file),
        })
    }

    /// Makes a fully written staging file the object's content, atomically, recording
    /// `record` as its metadata.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::InvalidObjectName`] (including a key
    /// that would need an existing object to be a folder), I/O errors.
    pub fn commit(
        &self,
        bucket: &str,
        key: &str,
        mut staged: StagedFile,
        record: NewObject,
    ) -> Result<ObjectMeta> {
        self.require_bucket(bucket)?;
        check_key(key)?;
        let file = staged.file().map_err(|e| internal("staging", e))?;
        file.flush()
            .map_err(|e| internal("flushing the staging file", e))?;
        let meta = file
            .metadata()
            .map_err(|e| internal("reading the staging file", e))?;
        let sidecar = Sidecar {
            key: Some(key.to_owned()),
            etag: record.etag,
            content_type: record.options.content_type,
            user_metadata: record.options.user_metadata,
            content_headers: record.options.content_headers,
            checksum: record.options.checksum,
            content_md5: record.content_md5,
            parts: record.parts,
            blocks: record.blocks,
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            ino: meta.ino(),
        };
        // The bytes reach the disk before the lock: a large object's sync holds no reader up.
        file.sync_all()
            .map_err(|e| internal("writing the object", e))?;
        let json = serde_json::to_vec(&sidecar)
            .map_err(|e| internal("encoding metadata", io::Error::other(e)))?;
        let mut staged_sidecar = self.stage()?;
        let sidecar_file = staged_sidecar.file().map_err(|e| internal("staging", e))?;
        sidecar_file
            .write_all(&json)
            .and_then(|()| sidecar_file.sync_all())
            .map_err(|e| internal("writing metadata", e))?;
        let _guard = self.write_namespace();
        let target = self.home_for_write(bucket, key)?;
        let sidecar_path = self.sidecar_path(bucket, key);
        if let Some(parent) = sidecar_path.parent() {
            fs::create_dir_all(parent).map_err(|e| internal("creating the metadata folder", e))?;
        }
        publish(&staged_sidecar.path, &sidecar_path)
            .map_err(|e| internal("writing metadata", e))?;
        publish(&staged.path, &target).map_err(|e| internal("publishing the object", e))?;
        // The staged path no longer exists; dropping `staged` is now a no-op.
        self.generated_lock()
            .remove(&(bucket.to_owned(), key.to_owned()));
        // Rename keeps size, mtime and inode: the staged file's metadata is the
        // published object's.
        Ok(meta_from(key, &meta, Some(sidecar)))
    }

    /// Deletes an object; returns whether it existed.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`]; I/O errors.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<bool> {
        self.require_bucket(bucket)?;
        if check_key(key).is_err() {
            return Ok(false);
        }
        let _guard = self.write_namespace();
        let generated = self
            .generated_lock()
            .remove(&(bucket.to_owned(), key.to_owned()))
            .is_some();
        let mut existed = remove_regular_file(&self.keyed_path(bucket, key))
            .map_err(|e| internal("deleting the object", e))?;
        if let Some(path) = self.file_path(bucket, key)
            && remove_regular_file(&path).map_err(|e| internal("deleting the object", e))?
        {
            existed = true;
            // Remove folders the object leaves empty, up to the bucket.
            let bucket_dir = self.bucket_dir(bucket);
            let mut dir = path.parent().map(Path::to_path_buf);
            while let Some(d) = dir {
                if d == bucket_dir || fs::remove_dir(&d).is_err() {
                    break;
                }
                dir = d.parent().map(Path::to_path_buf);
            }
        }
        let _ = fs::remove_file(self.sidecar_path(bucket, key));
        Ok(existed || generated)
    }

    // ---- S3 multipart uploads ----

    fn upload_dir(&self, upload_id: &str) -> Result<PathBuf> {
        if upload_id.is_empty() || !upload_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::new(
                ErrorKind::NoSuchUpload,
                "The specified upload does not exist.",
            ));
        }
        Ok(self.stub_dir("uploads").join(upload_id))
    }

    /// An upload in progress (not completed): its folder and record.
    fn upload_info(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
    ) -> Result<(PathBuf, UploadInfo)> {
        let (dir, info) = self.any_upload_info(upload_id, bucket, key)?;
        if dir.join(COMPLETED).exists() {
            return Err(Error::new(
                ErrorKind::NoSuchUpload,
                "The specified upload does not exist.",
            ));
        }
        Ok((dir, info))
    }

    /// An upload, in progress or completed: its folder and record.
    fn any_upload_info(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
    ) -> Result<(PathBuf, UploadInfo)> {
        let dir = self.upload_dir(upload_id)?;
        let info: UploadInfo = fs::read(dir.join("upload.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|i: &UploadInfo| i.bucket == bucket && i.key == key)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NoSuchUpload,
                    "The specified upload does not exist.",
                )
            })?;
        Ok((dir, info))
    }

    /// Writes a small record file whole: staged, synced, renamed into place.
    fn write_record(&self, target: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut staged = self.stage().map_err(io::Error::other)?;
        let file = staged.file()?;
        file.write_all(bytes)?;
        file.sync_all()?;
        publish(&staged.path, target)
    }

    /// The stored record of part `number`, if any.
    fn part_record(&self, dir: &Path, number: u32) -> Option<PartInfo> {
        fs::read(dir.join(format!("{number}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    /// Starts a multipart upload and returns its id.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::InvalidObjectName`], I/O errors.
    pub fn create_upload(&self, bucket: &str, key: &str, options: WriteOptions) -> Result<String> {
        self.require_bucket(bucket)?;
        check_key(key)?;
        let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        let dir = self.upload_dir(&id)?;
        fs::create_dir_all(&dir).map_err(|e| internal("creating the upload", e))?;
        let info = UploadInfo {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            options,
            initiated_ms: now_ms(),
        };
        let json = serde_json::to_vec(&info)
            .map_err(|e| internal("encoding the upload", io::Error::other(e)))?;
        self.write_record(&dir.join("upload.json"), &json)
            .map_err(|e| internal("writing the upload", e))?;
        Ok(id)
    }

    /// Stores a part of an upload (replacing an earlier part with the same number).
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`], [`ErrorKind::InvalidArgument`] for a part number
    /// outside 1..=10000, I/O errors.
    pub fn put_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: u32,
        staged: StagedFile,
        md5_hex: &str,
    ) -> Result<PartInfo> {
        if !(1..=10_000).contains(&number) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            ));
        }
        let (dir, _) = self.upload_info(upload_id, bucket, key)?;
        let mut staged = staged;
        let file = staged.file().map_err(|e| internal("staging", e))?;
        let size = file
            .metadata()
            .map_err(|e| internal("reading the part", e))?
            .len();
        file.sync_all()
            .map_err(|e| internal("storing the part", e))?;
        let info = PartInfo {
            number,
            etag: format!("\"{md5_hex}\""),
            size,
            uploaded_ms: now_ms(),
        };
        // The bytes go under a name of their own first, then the record naming them
        // replaces the number's record: a part retried with other bytes is never the new
        // record over the old bytes, whenever a crash comes.
        let replaced = self.part_record(&dir, number);
        publish(&staged.path, &part_file(&dir, &info))
            .map_err(|e| internal("storing the part", e))?;
        let json = serde_json::to_vec(&info)
            .map_err(|e| internal("encoding the part", io::Error::other(e)))?;
        self.write_record(&dir.join(format!("{number}.json")), &json)
            .map_err(|e| internal("storing the part", e))?;
        if let Some(old) = replaced
            && old.etag != info.etag
        {
            let _ = fs::remove_file(part_file(&dir, &old));
        }
        Ok(info)
    }

    /// The parts of an upload, by number.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`].
    pub fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartInfo>> {
        let (dir, _) = self.upload_info(upload_id, bucket, key)?;
        let mut parts: Vec<PartInfo> = fs::read_dir(&dir)
            .map_err(|e| internal("listing parts", e))?
            .flatten()
            .filter(|e| {
                e.file_name().to_string_lossy().ends_with(".json") && e.file_name() != "upload.json"
            })
            .filter_map(|e| fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect();
        parts.sort_by_key(|p| p.number);
        Ok(parts)
    }

    /// Uploads in progress in a bucket.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`].
    pub fn list_uploads(&self, bucket: &str) -> Result<Vec<UploadSummary>> {
        self.require_bucket(bucket)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(self.stub_dir("uploads"))
            .map_err(|e| internal("listing uploads", e))?
            .flatten()
        {
            let Some(info) = fs::read(entry.path().join("upload.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<UploadInfo>(&b).ok())
                .filter(|_| !entry.path().join(COMPLETED).exists())
            else {
                continue;
            };
            if info.bucket == bucket {
                out.push(UploadSummary {
                    key: info.key,
                    upload_id: entry.file_name().to_string_lossy().into_owned(),
                    initiated: UNIX_EPOCH + Duration::from_millis(info.initiated_ms),
                });
            }
        }
        out.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(out)
    }

    /// Completes an upload from the listed parts (number, quoted ETag), in ascending order.
    /// Completing it again with the same parts answers the object it made, while that is
    /// still the object stored (as S3 does; ceph/s3-tests' `test_multipart_upload`).
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`], [`ErrorKind::InvalidPartOrder`],
    /// [`ErrorKind::InvalidPart`] (missing part or wrong ETag), [`ErrorKind::EntityTooSmall`]
    /// (a part other than the last under 5 MiB), [`ErrorKind::InvalidRequest`] (no parts).
    pub fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[(u32, String)],
    ) -> Result<ObjectMeta> {
        let (dir, info) = self.any_upload_info(upload_id, bucket, key)?;
        if let Some(done) = fs::read(dir.join(COMPLETED))
            .ok()
            .and_then(|b| serde_json::from_slice::<CompletedUpload>(&b).ok())
        {
            let same_parts =
                done.parts.len() == listed.len()
                    && done.parts.iter().zip(listed).all(|((n, e), (ln, le))| {
                        n == ln && normalize_etag(e) == normalize_etag(le)
                    });
            return match self.head(bucket, key) {
                Ok(meta) if same_parts && meta.etag == done.etag => Ok(meta),
                _ => Err(Error::new(
                    ErrorKind::NoSuchUpload,
                    "The specified upload does not exist.",
                )),
            };
        }
        let stored: BTreeMap<u32, PartInfo> = self
            .list_parts(bucket, key, upload_id)?
            .into_iter()
            .map(|p| (p.number, p))
            .collect();
        let chosen: Vec<PartInfo> = check_completion(listed, |number, etag| {
            stored
                .get(&number)
                .filter(|p| normalize_etag(&p.etag) == normalize_etag(etag))
                .map(|p| p.size)
        })?
        .iter()
        .filter_map(|n| stored.get(n).cloned())
        .collect();
        let mut staged = self.stage()?;
        let mut md5s = Vec::with_capacity(chosen.len() * 16);
        {
            let out = staged.file().map_err(|e| internal("staging", e))?;
            for part in &chosen {
                let mut f =
                    File::open(part_file(&dir, part)).map_err(|e| internal("reading a part", e))?;
                io::copy(&mut f, out).map_err(|e| internal("assembling the object", e))?;
                let md5 = hex::decode(normalize_etag(&part.etag)).unwrap_or_default();
                md5s.extend_from_slice(&md5);
            }
        }
        let etag = format!("\"{}-{}\"", hex::encode(Md5::digest(&md5s)), chosen.len());
        let sizes = chosen.iter().map(|p| p.size).collect();
        let mut options = info.options;
        options.checksum = None;
        let record = NewObject {
            etag,
            options,
            parts: sizes,
            ..NewObject::default()
        };
        let meta = self.commit(bucket, key, staged, record)?;
        // Keep what was completed, for a repeated completion; free the parts.
        let done = CompletedUpload {
            etag: meta.etag.clone(),
            parts: listed.to_vec(),
        };
        if let Ok(json) = serde_json::to_vec(&done) {
            let _ = self.write_record(&dir.join(COMPLETED), &json);
        }
        if let Ok(entries) = fs::read_dir(&dir) {
            for e in entries.flatten() {
                if e.file_name() != "upload.json" && e.file_name() != COMPLETED {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(meta)
    }

    /// Aborts an upload and frees its parts.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`].
    pub fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        let (dir, _) = self.upload_info(upload_id, bucket, key)?;
        fs::remove_dir_all(dir).map_err(|e| internal("aborting the upload", e))
    }

    // ---- Azure blocks ----

    fn blocks_dir(&self, bucket: &str, key: &str) -> PathBuf {
        self.stub_dir("blocks")
            .join(sha256_hex(&format!("{bucket}/{key}")))
    }

    /// Stores an uncommitted block.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`], [`ErrorKind::InvalidHeaderValue`] for a block id that
    /// is not base64 of at most 64 bytes, I/O errors.
    pub fn put_block(
        &self,
        bucket: &str,
        key: &str,
        block_id: &str,
        staged: StagedFile,
    ) -> Result<()> {
        self.require_bucket(bucket)?;
        check_key(key)?;
        check_block_id(block_id)?;
        let dir = self.blocks_dir(bucket, key);
        let mut staged = staged;
        fs::create_dir_all(&dir)
            .and_then(|()| staged.file()?.sync_all())
            .and_then(|()| publish(&staged.path, &dir.join(hex::encode(block_id))))
            .map_err(|e| internal("storing the block", e))
    }

    /// The committed and uncommitted blocks of a blob.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`]; [`ErrorKind::NoSuchKey`] when there is neither a blob
    /// nor uncommitted blocks.
    pub fn block_list(&self, bucket: &str, key: &str) -> Result<(BlockIds, BlockIds)> {
        self.require_bucket(bucket)?;
        let committed = match self.head(bucket, key) {
            Ok(m) => Some(m.blocks),
            Err(e) if e.kind() == ErrorKind::NoSuchKey => None,
            Err(e) => return Err(e),
        };
        let mut uncommitted = Vec::new();
        if let Ok(entries) = fs::read_dir(self.blocks_dir(bucket, key)) {
            for e in entries.flatten() {
                let id = hex::decode(e.file_name().to_string_lossy().as_bytes())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                if let (Some(id), Ok(m)) = (id, e.metadata()) {
                    uncommitted.push((id, m.len()));
                }
            }
        }
        uncommitted.sort();
        match committed {
            None if uncommitted.is_empty() => Err(no_such_key(key)),
            c => Ok((c.unwrap_or_default(), uncommitted)),
        }
    }

    /// Commits a blob from a block list.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidPart`] (Azure `InvalidBlockList`) when a block is missing.
    pub fn put_block_list(
        &self,
        bucket: &str,
        key: &str,
        items: &[BlockChoice],
        options: WriteOptions,
    ) -> Result<ObjectMeta> {
        self.require_bucket(bucket)?;
        check_key(key)?;
        let dir = self.blocks_dir(bucket, key);
        // The current blob, for committed blocks: open once so every block comes from
        // one version.
        let current = match self.open(bucket, key) {
            Ok(OpenObject {
                meta,
                body: ObjectBody::File(f),
            }) => Some((meta, f)),
            _ => None,
        };
        let committed_offset = |id: &str| -> Option<(u64, u64)> {
            let (meta, _) = current.as_ref()?;
            let mut offset = 0;
            for (bid, size) in &meta.blocks {
                if bid == id {
                    return Some((offset, *size));
                }
                offset += size;
            }
            None
        };
        let mut staged = self.stage()?;
        let mut md5 = Md5::new();
        let mut blocks = Vec::with_capacity(items.len());
        {
            let out = staged.file().map_err(|e| internal("staging", e))?;
            let mut buf = vec![0u8; 1 << 20];
            for item in items {
                let (id, uncommitted_first, committed_ok) = match item {
                    BlockChoice::Latest(id) => (id, true, true),
                    BlockChoice::Uncommitted(id) => (id, true, false),
                    BlockChoice::Committed(id) => (id, false, true),
                };
                let missing = || {
                    Error::new(
                        ErrorKind::InvalidPart,
                        format!("The specified block list is invalid: block '{id}' not found."),
                    )
                };
                let uncommitted_path = dir.join(hex::encode(id));
                let (mut reader, len): (Box<dyn Read>, u64) =
                    if uncommitted_first && uncommitted_path.is_file() {
                        let f = File::open(&uncommitted_path)
                            .map_err(|e| internal("reading a block", e))?;
                        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                        (Box::new(f), len)
                    } else if committed_ok {
                        let (offset, len) = committed_offset(id).ok_or_else(missing)?;
                        let (_, f) = current.as_ref().ok_or_else(missing)?;
                        let mut f = f.try_clone().map_err(|e| internal("reading a block", e))?;
                        f.seek(SeekFrom::Start(offset))
                            .map_err(|e| internal("reading a block", e))?;
                        (Box::new(f.take(len)), len)
                    } else {
                        return Err(missing());
                    };
                let mut copied = 0u64;
                loop {
                    let n = reader
                        .read(&mut buf)
                        .map_err(|e| internal("reading a block", e))?;
                    if n == 0 {
                        break;
                    }
                    md5.update(&buf[..n]);
                    out.write_all(&buf[..n])
                        .map_err(|e| internal("assembling the blob", e))?;
                    copied += n as u64;
                }
                if copied != len {
                    return Err(internal(
                        "assembling the blob",
                        io::Error::other("a block changed while it was read"),
                    ));
                }
                blocks.push((id.clone(), len));
            }
        }
        let digest = md5.finalize();
        let etag = format!("\"{}\"", hex::encode(digest));
        let content_md5 = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(digest)
        };
        let record = NewObject {
            etag,
            content_md5: Some(content_md5),
            options,
            blocks,
            ..NewObject::default()
        };
        let meta = self.commit(bucket, key, staged, record)?;
        let _ = fs::remove_dir_all(&dir);
        Ok(meta)
    }
}

/// An object's metadata from its file and its sidecar, when the sidecar names this very
/// file (a file changed behind the stub's back, or a publish cut short between the
/// metadata and the bytes, keeps only what the file says).
fn described(key: &str, meta: &fs::Metadata, sidecar: Option<Sidecar>) -> ObjectMeta {
    let (size, mtime, ino) = (meta.len(), mtime_ns(meta), meta.ino());
    let sidecar = sidecar.filter(|s| s.size == size && s.mtime_ns == mtime && s.ino == ino);
    meta_from(key, meta, sidecar)
}

/// An object's metadata from its file and, when it describes that file, its sidecar.
fn meta_from(key: &str, meta: &fs::Metadata, sidecar: Option<Sidecar>) -> ObjectMeta {
    let (size, mtime, ino) = (meta.len(), mtime_ns(meta), meta.ino());
    let guessed = || {
        mime_guess::from_path(key)
            .first_raw()
            .unwrap_or("application/octet-stream")
            .to_owned()
    };
    match sidecar {
        Some(s) => ObjectMeta {
            key: key.to_owned(),
            size,
            etag: s.etag,
            last_modified: system_time(meta),
            content_type: s.content_type.unwrap_or_else(guessed),
            user_metadata: s.user_metadata,
            content_headers: s.content_headers,
            checksum: s.checksum,
            content_md5: s.content_md5,
            parts: s.parts,
            blocks: s.blocks,
        },
        None => {
            // The ctime too, which nothing in user space can set back: a same-size
            // rewrite in place with its mtime restored (`cp -p`, `touch -r`, `rsync
            // --inplace -t`) is another version.
            let ctime = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
            let digest = Sha256::digest(
                format!("talon-file-v2\0{size}\0{mtime}\0{ino}\0{ctime}").as_bytes(),
            );
            ObjectMeta {
                key: key.to_owned(),
                size,
                etag: format!("\"{}\"", hex::encode(&digest[..16])),
                last_modified: system_time(meta),
                content_type: guessed(),
                user_metadata: BTreeMap::new(),
                content_headers: BTreeMap::new(),
                checksum: None,
                content_md5: None,
                parts: Vec::new(),
                blocks: Vec::new(),
            }
        }
    }
}

/// The file holding a part's bytes, named by its number and MD5.
fn part_file(dir: &Path, part: &PartInfo) -> PathBuf {
    let md5 = talon_protocols::conditional::normalize_etag(&part.etag);
    dir.join(format!("{}.{md5}.part", part.number))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use talon_protocols::multipart::MIN_PART_SIZE;

    fn store() -> (tempfile::TempDir, ObjectStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::new(
            dir.path(),
            vec![GeneratedObject::new("gen", "g.bin", 100, 1)],
        )
        .unwrap();
        (dir, store)
    }

    fn write(store: &ObjectStore, bucket: &str, key: &str, data: &[u8]) -> Result<ObjectMeta> {
        let mut staged = store.stage()?;
        staged.file().unwrap().write_all(data).unwrap();
        let etag = format!("\"{}\"", hex::encode(Md5::digest(data)));
        store.commit(
            bucket,
            key,
            staged,
            NewObject {
                etag,
                ..NewObject::default()
            },
        )
    }

    fn read_all(store: &ObjectStore, bucket: &str, key: &str) -> Vec<u8> {
        match store.open(bucket, key).unwrap().body {
            ObjectBody::File(mut f) => {
                let mut v = Vec::new();
                f.read_to_end(&mut v).unwrap();
                v
            }
            ObjectBody::Generated(g) => {
                let mut v = vec![0; g.size as usize];
                g.fill(0, &mut v);
                v
            }
        }
    }

    #[test]
    fn write_read_overwrite_delete() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let m = write(&s, "b1", "dir/a b.txt", b"hello").unwrap();
        assert_eq!(
            m.etag,
            format!("\"{}\"", hex::encode(Md5::digest(b"hello")))
        );
        assert_eq!(m.content_type, "text/plain");
        assert_eq!(read_all(&s, "b1", "dir/a b.txt"), b"hello");
        // An open reader keeps the old version across an overwrite.
        let old = s.open("b1", "dir/a b.txt").unwrap();
        write(&s, "b1", "dir/a b.txt", b"world!").unwrap();
        let ObjectBody::File(mut f) = old.body else {
            panic!("file")
        };
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        assert_eq!(v, b"hello");
        assert_eq!(s.head("b1", "dir/a b.txt").unwrap().size, 6);
        assert!(s.delete("b1", "dir/a b.txt").unwrap());
        assert!(
            !s.bucket_dir("b1").join("dir").exists(),
            "empty folders are removed"
        );
        assert_eq!(
            s.head("b1", "dir/a b.txt").unwrap_err().kind(),
            ErrorKind::NoSuchKey
        );
        s.delete_bucket("b1").unwrap();
        assert!(!s.bucket_exists("b1"));
    }

    #[test]
    fn files_changed_behind_the_stub_get_new_etags() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let m1 = write(&s, "b1", "k", b"one").unwrap();
        fs::write(s.file_path("b1", "k").unwrap(), b"two!").unwrap();
        let m2 = s.head("b1", "k").unwrap();
        assert_ne!(m1.etag, m2.etag);
        assert_eq!(m2.size, 4);
        assert_eq!(
            m2.etag,
            s.head("b1", "k").unwrap().etag,
            "stable across calls"
        );
    }

    /// The read review's RP-09: a data-folder file rewritten in place with the same size
    /// and its mtime put back (`cp -p` onto it, `touch -r`, `rsync --inplace -t`) is
    /// another version: its ETag changes, or the cache would mix the two contents.
    #[test]
    fn a_file_rewritten_in_place_with_its_mtime_kept_gets_a_new_etag() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let path = s.bucket_dir("b1").join("data.csv");
        fs::write(&path, b"version one").unwrap();
        let before = s.head("b1", "data.csv").unwrap();
        let stat = fs::metadata(&path).unwrap();
        let mtime = stat.modified().unwrap();
        // Same inode, same size, same mtime; only the ctime can tell (wait until the
        // filesystem's clock has moved on, so that it does).
        loop {
            let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, b"version two", 0).unwrap();
            file.set_modified(mtime).unwrap();
            drop(file);
            if fs::metadata(&path).unwrap().ctime_nsec() != stat.ctime_nsec()
                || fs::metadata(&path).unwrap().ctime() != stat.ctime()
            {
                break;
            }
        }
        let after_stat = fs::metadata(&path).unwrap();
        assert_eq!(
            (
                after_stat.ino(),
                after_stat.len(),
                after_stat.modified().unwrap()
            ),
            (stat.ino(), stat.len(), mtime)
        );
        let after = s.head("b1", "data.csv").unwrap();
        assert_ne!(before.etag, after.etag, "the rewritten file kept its ETag");
        assert_eq!(read_all(&s, "b1", "data.csv"), b"version two");
    }

    /// The red-team review's RT-06: DeleteBucket removed the whole folder when the
    /// listing was empty, and the listing cannot show every file (a name that is not
    /// UTF-8, a path longer than a key may be). Those files stay, and the bucket is not
    /// empty.
    #[test]
    fn delete_bucket_keeps_files_the_listing_cannot_show() {
        use std::os::unix::ffi::OsStrExt;
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let dir = s.bucket_dir("b1");
        let latin1 = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
        fs::write(&latin1, b"latin-1 name").unwrap();
        let deep = dir.join(vec!["d".repeat(200); 6].join("/")).join("file");
        fs::create_dir_all(deep.parent().unwrap()).unwrap();
        fs::write(&deep, b"deep").unwrap();
        assert!(
            s.list("b1").unwrap().is_empty(),
            "the listing shows neither"
        );
        assert_eq!(
            s.delete_bucket("b1").unwrap_err().kind(),
            ErrorKind::BucketNotEmpty
        );
        assert_eq!(fs::read(&latin1).unwrap(), b"latin-1 name");
        assert_eq!(fs::read(&deep).unwrap(), b"deep");
        // Empty folders the store made are no obstacle.
        s.create_bucket("b2").unwrap();
        write(&s, "b2", "x/y/z", b"1").unwrap();
        assert!(s.delete("b2", "x/y/z").unwrap());
        fs::create_dir_all(s.bucket_dir("b2").join("left/over")).unwrap();
        s.delete_bucket("b2").unwrap();
        assert!(!s.bucket_exists("b2"));
    }

    /// The red-team review's RT-07: what the folder holds besides regular files is
    /// never served or followed. A FIFO is not an object (a GET of it hung every read
    /// and write of the stub); links to folders are not walked (two `x -> .` made one
    /// listing grow without bound) nor written or deleted through (a PUT or DELETE
    /// acted outside the data folder).
    #[test]
    fn special_files_and_links_in_the_folder_are_not_objects() {
        let (d, s) = store();
        s.create_bucket("b1").unwrap();
        let dir = s.bucket_dir("b1");
        fs::write(dir.join("a.txt"), b"plain").unwrap();
        // libc rather than the mkfifo program: a child process forked while another
        // test holds the folder's lock would hold it too, until its exec.
        let pipe = std::ffi::CString::new(std::os::unix::ffi::OsStringExt::into_vec(
            dir.join("pipe").into_os_string(),
        ))
        .unwrap();
        // SAFETY: `pipe` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(pipe.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink(".", dir.join("x")).unwrap();
        std::os::unix::fs::symlink(".", dir.join("y")).unwrap();
        let outside = d.path().join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret.txt"), b"not the stub's").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("linkdir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), dir.join("link.txt")).unwrap();

        // Each call is bounded: a hang is a failure, not a stuck test.
        let bounded = |what: &str, f: Box<dyn FnOnce() -> String + Send>| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(f());
            });
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{what} hung"))
        };
        let s = std::sync::Arc::new(s);
        let (s1, s2) = (s.clone(), s.clone());
        let got = bounded(
            "a read of the FIFO",
            Box::new(move || format!("{:?}", s1.open("b1", "pipe").err().map(|e| e.kind()))),
        );
        assert_eq!(got, format!("{:?}", Some(ErrorKind::NoSuchKey)));
        let listed = bounded(
            "the listing",
            Box::new(move || {
                let keys: Vec<String> = s2.list("b1").unwrap().into_iter().map(|m| m.key).collect();
                keys.join(",")
            }),
        );
        assert_eq!(listed, "a.txt");
        for key in ["link.txt", "linkdir/secret.txt", "x/a.txt"] {
            assert_eq!(
                s.head("b1", key).unwrap_err().kind(),
                ErrorKind::NoSuchKey,
                "{key}"
            );
        }
        // A write through the linked folder stays in the stub's own keeping.
        write(&s, "b1", "linkdir/planted.txt", b"planted").unwrap();
        assert!(!outside.join("planted.txt").exists(), "written outside");
        assert_eq!(read_all(&s, "b1", "linkdir/planted.txt"), b"planted");
        assert!(!s.delete("b1", "linkdir/secret.txt").unwrap());
        assert!(!s.delete("b1", "link.txt").unwrap());
        assert_eq!(
            fs::read(outside.join("secret.txt")).unwrap(),
            b"not the stub's"
        );
    }

    #[test]
    fn generated_objects_list_and_can_be_replaced() {
        let (_d, s) = store();
        assert!(s.bucket_exists("gen"));
        assert_eq!(s.list("gen").unwrap().len(), 1);
        let g = GeneratedObject::new("gen", "g.bin", 100, 1);
        assert_eq!(s.head("gen", "g.bin").unwrap().etag, g.etag());
        write(&s, "gen", "g.bin", b"replaced").unwrap();
        assert_eq!(read_all(&s, "gen", "g.bin"), b"replaced");
        assert!(s.delete("gen", "g.bin").unwrap());
        assert_eq!(
            s.head("gen", "g.bin").unwrap_err().kind(),
            ErrorKind::NoSuchKey
        );
    }

    #[test]
    fn a_page_of_a_large_generated_set_lists_as_the_whole_bucket_would() {
        let dir = tempfile::tempdir().unwrap();
        let set: crate::generated::GeneratedSet =
            "gen/train/=20000,1-100,3".parse().expect("a set");
        let s = ObjectStore::new(dir.path(), set.objects().collect()).unwrap();
        // Written objects before, among (one in place of a generated key) and after the set.
        let written = [
            "a.txt",
            "train/0000500",
            "train/0000500x",
            "train/sub/x",
            "z.txt",
        ];
        for key in written {
            write(&s, "gen", key, key.as_bytes()).unwrap();
        }
        // What the bucket holds, by key: a written object hides a generated one.
        let mut all: BTreeMap<String, u64> = set.objects().map(|g| (g.key, g.size)).collect();
        for key in written {
            all.insert(key.to_owned(), key.len() as u64);
        }
        let entries = |page: &ListPage<ObjectMeta>| -> Vec<(String, u64)> {
            page.entries
                .iter()
                .map(|m| (m.key.clone(), m.size))
                .collect()
        };
        let cases: [(&str, Option<&str>, usize); 4] = [
            ("", None, 1000),
            ("train/", Some("/"), 1000),
            ("train/00001", None, 333),
            ("train/sub/", Some("/"), 10),
        ];
        for (prefix, delimiter, max_keys) in cases {
            let mut marker: Option<String> = None;
            let mut pages = 0;
            loop {
                let query = ListQuery {
                    prefix,
                    delimiter,
                    marker: marker.as_deref(),
                    max_keys,
                };
                let page = s.list_page("gen", &query).unwrap();
                let whole = paginate(all.iter(), |(k, _)| k.as_str(), &query);
                let expected: Vec<(String, u64)> = whole
                    .entries
                    .iter()
                    .map(|(k, v)| ((*k).clone(), **v))
                    .collect();
                assert_eq!(entries(&page), expected, "{prefix:?} after {marker:?}");
                assert_eq!(page.common_prefixes, whole.common_prefixes);
                assert_eq!(page.is_truncated, whole.is_truncated);
                assert_eq!(page.next_marker, whole.next_marker);
                pages += 1;
                match page.next_marker {
                    Some(next) => marker = Some(next),
                    None => break,
                }
            }
            assert!(pages >= 1);
        }
        // The written object in place of a generated one is the one listed.
        let q = ListQuery {
            prefix: "train/0000500",
            max_keys: 10,
            ..ListQuery::default()
        };
        let page = s.list_page("gen", &q).unwrap();
        assert_eq!(
            entries(&page),
            [
                ("train/0000500".to_owned(), 13),
                ("train/0000500x".to_owned(), 14)
            ]
        );
        assert_eq!(s.list("gen").unwrap().len(), all.len());
    }

    /// Every file under `root` that is not the store's own state or a bucket's folder.
    fn stray_files(root: &Path, bucket: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p == root.join(STUB_DIR) || p == root.join(bucket) {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    }

    #[test]
    fn any_key_s3_accepts_is_stored_read_and_listed_in_s3_order() {
        let (d, s) = store();
        s.create_bucket("b1").unwrap();
        let long_segment = "s".repeat(300);
        let longest = "\u{e9}".repeat(MAX_KEY_LEN / 2);
        let keys = [
            "a",
            "a/b",
            "a/b/c",
            "d/x",
            "d",
            "asdf/",
            "0/",
            "0/1000",
            "x//y",
            "/lead",
            "./dot",
            "a/../b",
            "..",
            ".",
            "sp ace+plus%20",
            "\u{e9}/\u{fc}",
            &long_segment,
            &longest,
            "foo/bar",
            "foo/bar/xyzzy",
            "quux/thud",
            "plain/file.txt",
        ];
        for (i, key) in keys.iter().enumerate() {
            write(&s, "b1", key, format!("body {i}").as_bytes())
                .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(
                read_all(&s, "b1", key),
                format!("body {i}").as_bytes(),
                "{key:?}"
            );
            assert_eq!(s.head("b1", key).unwrap().key, *key);
        }
        let mut sorted: Vec<&str> = keys.to_vec();
        sorted.sort_unstable();
        let listed: Vec<String> = s.list("b1").unwrap().into_iter().map(|m| m.key).collect();
        assert_eq!(listed, sorted, "each key once, in UTF-8 byte order");
        // Keys a file can have are files in the bucket's folder; nothing lands elsewhere.
        assert_eq!(
            fs::read(d.path().join("b1/plain/file.txt")).unwrap(),
            b"body 21"
        );
        assert_eq!(fs::read(d.path().join("b1/a")).unwrap(), b"body 0");
        assert!(
            stray_files(d.path(), "b1").is_empty(),
            "{:?}",
            stray_files(d.path(), "b1")
        );
        // Overwrites keep one copy; deletes remove every one.
        write(&s, "b1", "a/b", b"again").unwrap();
        assert_eq!(read_all(&s, "b1", "a/b"), b"again");
        assert_eq!(s.list("b1").unwrap().len(), keys.len());
        for key in keys {
            assert!(s.delete("b1", key).unwrap(), "{key:?}");
            assert_eq!(
                s.head("b1", key).unwrap_err().kind(),
                ErrorKind::NoSuchKey,
                "{key:?}"
            );
        }
        assert!(s.list("b1").unwrap().is_empty());
        assert_eq!(
            fs::read_dir(s.stub_dir("keyed").join("b1"))
                .unwrap()
                .count(),
            0
        );
        s.delete_bucket("b1").unwrap();
    }

    #[test]
    fn keys_s3_refuses_are_refused_and_change_nothing() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let too_long = "k".repeat(MAX_KEY_LEN + 1);
        for bad in ["", "x\0y", too_long.as_str()] {
            assert_eq!(
                write(&s, "b1", bad, b"x").unwrap_err().kind(),
                ErrorKind::InvalidObjectName,
                "{bad:?}"
            );
        }
        assert!(s.list("b1").unwrap().is_empty());
        assert_eq!(
            fs::read_dir(s.stub_dir("tmp")).unwrap().count(),
            0,
            "no staging file left"
        );
    }

    #[test]
    fn a_keyed_object_keeps_its_home_until_deleted() {
        let (d, s) = store();
        s.create_bucket("b1").unwrap();
        write(&s, "b1", "a", b"file a").unwrap();
        write(&s, "b1", "a/b", b"keyed").unwrap();
        assert!(s.delete("b1", "a").unwrap());
        // Now a file could hold a/b, but the key already has a home: one copy, listed once.
        write(&s, "b1", "a/b", b"still keyed").unwrap();
        assert!(!d.path().join("b1/a/b").exists());
        let listed: Vec<String> = s.list("b1").unwrap().into_iter().map(|m| m.key).collect();
        assert_eq!(listed, ["a/b"]);
        assert!(s.delete("b1", "a/b").unwrap());
        write(&s, "b1", "a/b", b"a file now").unwrap();
        assert_eq!(fs::read(d.path().join("b1/a/b")).unwrap(), b"a file now");
    }

    #[test]
    fn a_publish_cut_short_shows_a_whole_old_version_or_nothing() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        // Cut between the metadata and the bytes of a new keyed object: the record is
        // there, the bytes are not. Not listed, not found.
        let ghost = Sidecar {
            key: Some("ghost/".to_owned()),
            etag: "\"new\"".to_owned(),
            content_type: None,
            user_metadata: BTreeMap::new(),
            content_headers: BTreeMap::new(),
            checksum: None,
            content_md5: None,
            parts: Vec::new(),
            blocks: Vec::new(),
            size: 3,
            mtime_ns: 1,
            ino: 1,
        };
        fs::create_dir_all(s.stub_dir("meta").join("b1")).unwrap();
        fs::write(
            s.sidecar_path("b1", "ghost/"),
            serde_json::to_vec(&ghost).unwrap(),
        )
        .unwrap();
        assert!(s.list("b1").unwrap().is_empty());
        assert_eq!(
            s.head("b1", "ghost/").unwrap_err().kind(),
            ErrorKind::NoSuchKey
        );
        // Cut between the metadata and the bytes of an overwrite: the old bytes, whole,
        // under an ETag of their own (neither the new version's nor a stale one), once.
        let old = write(&s, "b1", "marker/", b"old bytes").unwrap();
        let new = Sidecar {
            key: Some("marker/".to_owned()),
            etag: "\"new-version\"".to_owned(),
            size: 99,
            ..ghost
        };
        fs::write(
            s.sidecar_path("b1", "marker/"),
            serde_json::to_vec(&new).unwrap(),
        )
        .unwrap();
        let seen = s.head("b1", "marker/").unwrap();
        assert_eq!(read_all(&s, "b1", "marker/"), b"old bytes");
        assert_eq!(seen.size, 9);
        assert_ne!(seen.etag, new.etag);
        assert_ne!(seen.etag, old.etag);
        let listed: Vec<String> = s.list("b1").unwrap().into_iter().map(|m| m.key).collect();
        assert_eq!(listed, ["marker/"]);
    }

    #[test]
    fn staging_files_left_by_a_crash_go_when_the_folder_is_next_opened() {
        let dir = tempfile::tempdir().unwrap();
        let first = ObjectStore::new(dir.path(), Vec::new()).unwrap();
        let leftover = first.stub_dir("tmp").join("0123");
        fs::write(&leftover, b"half an upload").unwrap();
        // A second process on the same folder may be mid-upload: it leaves them.
        let second = ObjectStore::new(dir.path(), Vec::new()).unwrap();
        assert!(leftover.exists());
        drop((first, second));
        let _third = ObjectStore::new(dir.path(), Vec::new()).unwrap();
        assert!(!leftover.exists());
    }

    #[test]
    fn a_retried_part_replaces_the_bytes_with_its_record() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let id = s
            .create_upload("b1", "k/", WriteOptions::default())
            .unwrap();
        let put = |data: &[u8]| {
            let mut staged = s.stage().unwrap();
            staged.file().unwrap().write_all(data).unwrap();
            s.put_part("b1", "k/", &id, 1, staged, &hex::encode(Md5::digest(data)))
                .unwrap()
        };
        put(b"first try");
        let second = put(b"second try, longer");
        let parts = s.list_parts("b1", "k/", &id).unwrap();
        assert_eq!(parts, std::slice::from_ref(&second));
        s.complete_upload("b1", "k/", &id, &[(1, second.etag)])
            .unwrap();
        assert_eq!(read_all(&s, "b1", "k/"), b"second try, longer");
    }

    #[test]
    fn multipart_rules() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let id = s
            .create_upload("b1", "big", WriteOptions::default())
            .unwrap();
        let put = |n: u32, data: &[u8]| {
            let mut staged = s.stage().unwrap();
            staged.file().unwrap().write_all(data).unwrap();
            s.put_part("b1", "big", &id, n, staged, &hex::encode(Md5::digest(data)))
                .unwrap()
        };
        let p1 = put(1, &vec![1u8; MIN_PART_SIZE as usize]);
        let p2 = put(2, b"tail");
        let err = s
            .complete_upload(
                "b1",
                "big",
                &id,
                &[(2, p2.etag.clone()), (1, p1.etag.clone())],
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidPartOrder);
        let err = s
            .complete_upload("b1", "big", &id, &[(1, "\"bad\"".into())])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidPart);
        let m = s
            .complete_upload("b1", "big", &id, &[(1, p1.etag), (2, p2.etag)])
            .unwrap();
        assert!(m.etag.ends_with("-2\""));
        assert_eq!(m.parts, vec![MIN_PART_SIZE, 4]);
        assert_eq!(m.size, MIN_PART_SIZE + 4);
        assert_eq!(
            s.list_parts("b1", "big", &id).unwrap_err().kind(),
            ErrorKind::NoSuchUpload
        );
    }

    #[test]
    fn a_completed_upload_completes_again_with_the_same_parts_only() {
        let (d, s) = store();
        s.create_bucket("b1").unwrap();
        let id = s.create_upload("b1", "k", WriteOptions::default()).unwrap();
        let mut staged = s.stage().unwrap();
        staged.file().unwrap().write_all(b"only part").unwrap();
        let part = s
            .put_part(
                "b1",
                "k",
                &id,
                1,
                staged,
                &hex::encode(Md5::digest(b"only part")),
            )
            .unwrap();
        let listed = [(1, part.etag.clone())];
        let first = s.complete_upload("b1", "k", &id, &listed).unwrap();
        let again = s.complete_upload("b1", "k", &id, &listed).unwrap();
        assert_eq!(again.etag, first.etag);
        assert_eq!(read_all(&s, "b1", "k"), b"only part");
        let no_such_upload =
            |r: Result<ObjectMeta>| r.unwrap_err().kind() == ErrorKind::NoSuchUpload;
        assert!(no_such_upload(s.complete_upload(
            "b1",
            "k",
            &id,
            &[(2, part.etag.clone())]
        )));
        assert_eq!(
            s.list_parts("b1", "k", &id).unwrap_err().kind(),
            ErrorKind::NoSuchUpload
        );
        assert!(s.list_uploads("b1").unwrap().is_empty());
        // Once another write replaced the object, the upload's object is gone: refused.
        write(&s, "b1", "k", b"replaced").unwrap();
        assert!(no_such_upload(s.complete_upload("b1", "k", &id, &listed)));
        assert_eq!(read_all(&s, "b1", "k"), b"replaced");
        // The record goes when the folder is next opened.
        let upload_dir = s.stub_dir("uploads").join(&id);
        assert!(upload_dir.join(COMPLETED).exists());
        drop(s);
        let _reopened = ObjectStore::new(d.path(), Vec::new()).unwrap();
        assert!(!upload_dir.exists());
    }

    #[test]
    fn small_non_final_parts_are_refused() {
        let (_d, s) = store();
        s.create_bucket("b1").unwrap();
        let id = s.create_upload("b1", "k", WriteOptions::default()).unwrap();
        let mut etags = Vec::new();
        for n in 1..=2 {
            let mut staged = s.stage().unwrap();
            staged.file().unwrap().write_all(b"tiny").unwrap();
            etags.push((
                n,
                s.put_part(
                    "b1",
                    "k",
                    &id,
                    n,
                    staged,
                    &hex::encode(Md5::digest(b"tiny")),
                )
                .unwrap()
                .etag,
            ));
        }
        assert_eq!(
            s.complete_upload("b1", "k", &id, &etags)
                .unwrap_err()
                .kind(),
            ErrorKind::EntityTooSmall
        );
    }

    #[test]
    fn block_lists_assemble_and_reuse_committed_blocks() {
        let (_d, s) = store();
        s.create_bucket("c1").unwrap();
        let block = |id: &str, data: &[u8]| {
            let mut staged = s.stage().unwrap();
            staged.file().unwrap().write_all(data).unwrap();
            s.put_block("c1", "blob", id, staged).unwrap();
        };
        block("QUFB", b"aaa");
        block("QkJC", b"bb");
        let (committed, uncommitted) = s.block_list("c1", "blob").unwrap();
        assert!(committed.is_empty());
        assert_eq!(uncommitted.len(), 2);
        s.put_block_list(
            "c1",
            "blob",
            &[
                BlockChoice::Latest("QkJC".into()),
                BlockChoice::Latest("QUFB".into()),
            ],
            WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(read_all(&s, "c1", "blob"), b"bbaaa");
        block("Q0ND", b"c");
        s.put_block_list(
            "c1",
            "blob",
            &[
                BlockChoice::Committed("QUFB".into()),
                BlockChoice::Uncommitted("Q0ND".into()),
            ],
            WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(read_all(&s, "c1", "blob"), b"aaac");
        let err = s
            .put_block_list(
                "c1",
                "blob",
                &[BlockChoice::Uncommitted("QUFB".into())],
                WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidPart);
        assert_eq!(
            read_all(&s, "c1", "blob"),
            b"aaac",
            "a failed commit changes nothing"
        );
    }
}
