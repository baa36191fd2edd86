//! Revalidation in bulk: one listing page of an S3 folder says whether up to 1,000
//! remembered objects are still the versions the worker holds, where a `HEAD` each
//! would cost the origin a request per object.
//!
//! When an entry comes due, the worker lists the object's folder (`delimiter=/`, 1,000
//! keys) from its first key; where that page stops short of the object (a folder of more
//! than a page, remembered as such), from the object's key on (`start-after` the key
//! less its last character). A
//! listed key's ETag, size and Last-Modified (to the second, what a `HEAD` gives) equal
//! to the entry's keep it, as of the listing; anything else drops exactly that entry (its
//! next read asks the origin). The object that came due is answered from the page:
//! current, changed (then a `HEAD` brings its new headers, which no S3 listing carries),
//! or gone (absent where the page shows it would be). A listing vouches only for
//! entries learned after their Last-Modified second had passed ([`listing_can_vouch`]):
//! a same-bytes rewrite with new metadata within that second looks the same in a
//! listing, so those few (objects written moments before they were read) are
//! revalidated with a `HEAD` each.
//!
//! On S3 a listing is billed like about a dozen `GET`s, so it pays only where a page
//! covers more than that: a folder whose last two listings each listed fewer than
//! [`MIN_LISTING_YIELD`] entries this worker holds per full page is revalidated object by
//! object for [`SPARSE_FOLDER_MEMORY`], and so is one the credentials may not list. Azure's List
//! Blobs has no `start-after` (its marker is opaque): an Azure folder of more than a page
//! is listed from a narrowed prefix instead, the due key less its last three characters
//! ([`narrowed_prefix`]: the thousand numbered siblings of `train/0001234` share
//! `train/0001`), and where that page does not reach the key, the object is revalidated
//! alone with a conditional `HEAD`. On Azure a changed blob always has a new ETag
//! (metadata changes included), so a listing vouches as well as a `HEAD`.
//!
//! This module decides; [`crate::origins::StatCache`] asks and keeps.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use talon_protocols::origin::{ListResult, ListedEntry, ObjectInfo};

/// Keys one listing page covers (S3's most).
pub const LISTING_PAGE: usize = 1_000;

/// Of every full page of others listed, the entries a listing must refresh to be worth
/// its price again soon (a page that is not full needs as large a share of what it
/// lists: a folder's last page is short however many of its keys this worker holds).
pub const MIN_LISTING_YIELD: usize = 16;

/// How long a folder whose listing did not pay (or failed) is revalidated one object
/// at a time before a listing is tried again.
pub const SPARSE_FOLDER_MEMORY: Duration = Duration::from_secs(600);

/// Folders remembered as not worth listing, or as large, at most (those whose mark has
/// run out are forgotten first).
const SPARSE_FOLDERS_KEPT: usize = 10_000;

/// Where a listing that covers `key` starts: its folder (the prefix up to and
/// including the last `/`) and the key less its last character (every key between
/// that and `key` is in the folder too, and comes first in the page).
pub fn listing_start(key: &str) -> (&str, &str) {
    let folder = &key[..key.rfind('/').map_or(0, |at| at + 1)];
    let mut chars = key.chars();
    chars.next_back();
    (folder, chars.as_str())
}

/// Where one listing page meant to cover a due key starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStart<'a> {
    /// The folder's first key.
    Folder,
    /// S3: after this key (the due key less its last character, [`listing_start`]).
    After(&'a str),
    /// Azure, whose List Blobs has no start-after (its marker is opaque): the first key
    /// with this longer prefix ([`narrowed_prefix`]).
    Narrowed(&'a str),
}

/// Characters a narrowed listing drops from the due key ([`narrowed_prefix`]): in a
/// folder of numbered objects, the page lists the thousand that differ from the due key
/// in their last three digits only.
pub const NARROWED_CUT: usize = 3;

/// The prefix an Azure listing for `key` in `folder` starts from: the key less its last
/// [`NARROWED_CUT`] characters, never shorter than the folder. Every key with it sorts
/// together, so a page that is not cut short covers them all, the due key included.
pub fn narrowed_prefix<'a>(key: &'a str, folder: &str) -> &'a str {
    let mut end = key.len();
    for _ in 0..NARROWED_CUT {
        end = key[..end]
            .char_indices()
            .next_back()
            .map_or(0, |(at, _)| at);
    }
    &key[..end.max(folder.len()).min(key.len())]
}

/// The pages tried, in order, to cover `key` (in `folder`) on an origin that has
/// start-after (`S3`) or not (Azure), for a folder known to hold more than a page
/// (`large`) or not: from the folder's first key while it may fit one page, then from
/// as close to the key as the protocol allows. In a large S3 folder, where an earlier
/// page ended before the key (`page_end`, [`PageEnds`]), the first page starts there:
/// pages then follow one another instead of overlapping (in a shuffled pass a page
/// started at each due key overlapped the next ones, about six listings where one
/// would do), and a page that stops short of the key has still covered keys that
/// would have come due.
pub fn page_starts<'a>(
    key: &'a str,
    folder: &str,
    start_after: bool,
    large: bool,
    page_end: Option<&'a str>,
) -> Vec<PageStart<'a>> {
    let near = if start_after {
        let (_, after) = listing_start(key);
        (!after.is_empty()).then_some(PageStart::After(after))
    } else {
        let prefix = narrowed_prefix(key, folder);
        (prefix.len() > folder.len()).then_some(PageStart::Narrowed(prefix))
    };
    let follow = page_end
        .filter(|end| start_after && *end < key && end.starts_with(folder))
        .map(PageStart::After);
    match (near, large, follow) {
        (None, _, _) => vec![PageStart::Folder],
        (Some(near), true, None) => vec![near],
        (Some(near), true, Some(follow)) if follow != near => vec![follow, near],
        (Some(near), true, Some(_)) => vec![near],
        (Some(near), false, _) => vec![PageStart::Folder, near],
    }
}

/// Most page ends [`PageEnds`] keeps, all folders together (about 100 bytes each).
const PAGE_ENDS_KEPT: usize = 100_000;

/// Where recent listing pages of large folders ended (their last key, where more
/// followed), so that the next page of a folder starts where one ended
/// ([`page_starts`]). Bounded: past [`PAGE_ENDS_KEPT`] it starts again empty (pages
/// then overlap for a while; nothing else changes).
#[derive(Debug, Default)]
pub struct PageEnds {
    ends: Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl PageEnds {
    /// Records that a page of `folder` ended at `end` with more keys after it.
    pub fn note(&self, bucket: &str, folder: &str, end: &str) {
        let mut ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        if ends.len() >= PAGE_ENDS_KEPT {
            ends.clear();
        }
        ends.insert((folder_key(bucket, folder), end.to_owned()));
    }

    /// The last recorded page end of `folder` before `key`.
    pub fn before(&self, bucket: &str, folder: &str, key: &str) -> Option<String> {
        let folder = folder_key(bucket, folder);
        let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        ends.range(..(folder.clone(), key.to_owned()))
            .next_back()
            .filter(|(f, _)| *f == folder)
            .map(|(_, end)| end.clone())
    }
}

/// Whether a listed entry is the version `held` describes: the same ETag and size, and
/// the same Last-Modified to the second (a `HEAD`'s precision) where both say one. On
/// S3 the same bytes rewritten with new metadata keep the ETag; the new Last-Modified
/// tells them apart (within one second it cannot).
pub fn same_version(held: &ObjectInfo, listed: &ListedEntry) -> bool {
    let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs());
    held.etag == listed.etag
        && held.size == listed.size
        && match (held.last_modified, listed.last_modified) {
            (Some(a), Some(b)) => seconds(a) == seconds(b),
            _ => true,
        }
}

/// How far the origin's clock may be ahead of this worker's, for
/// [`listing_can_vouch`].
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);

/// Whether a listing can say that `held`, learned at `learned` (this worker's clock),
/// is still current. A listing gives ETag, size and Last-Modified only; the same bytes
/// rewritten with new metadata in the same second as `held`'s Last-Modified look the
/// same. A rewrite after `held` was learned carries a later Last-Modified, so once that
/// second (and [`CLOCK_MARGIN`]) had passed when `held` was learned, the listing can
/// vouch for it; before, only a `HEAD` can (ceph's
/// `test_object_set_get_metadata_overwrite_to_empty` writes twice within a second).
pub fn listing_can_vouch(held: &ObjectInfo, learned: SystemTime) -> bool {
    let Some(modified) = held.last_modified else {
        return false;
    };
    let Ok(since_epoch) = modified.duration_since(UNIX_EPOCH) else {
        return false;
    };
    let second_ended = UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs() + 1);
    learned >= second_ended + CLOCK_MARGIN
}

/// What a listing page says of the key that came due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageVerdict {
    /// Listed, the version held.
    Current,
    /// Listed as another version.
    Changed,
    /// Not listed where the page shows it would be: deleted.
    Gone,
    /// The page stops before the key's place (more than a page of keys sort between
    /// its start and the key): it says nothing.
    NotCovered,
}

/// What `page` (listed from [`listing_start`] of `key`) says of `key`, held as `held`.
pub fn verdict(page: &ListResult, key: &str, held: &ObjectInfo) -> PageVerdict {
    if let Some(listed) = page.objects.iter().find(|e| e.key == key) {
        return if same_version(held, listed) {
            PageVerdict::Current
        } else {
            PageVerdict::Changed
        };
    }
    let reached = page.next_token.is_none()
        || page.objects.last().is_some_and(|e| e.key.as_str() > key)
        || page
            .common_prefixes
            .last()
            .is_some_and(|p| p.as_str() > key);
    if reached {
        PageVerdict::Gone
    } else {
        PageVerdict::NotCovered
    }
}

/// Listings in a row that must not pay (or fail) before a folder is left alone: one
/// alone may just have started near the folder's end, where few keys are left.
pub const STRIKES: u8 = 2;

/// The folders not worth a listing for now: their last [`STRIKES`] listings refreshed
/// too little, or failed.
#[derive(Debug, Default)]
pub struct SparseFolders {
    /// Per folder: listings in a row that did not pay, and until when it is left alone.
    strikes: Mutex<HashMap<String, (u8, Instant)>>,
}

impl SparseFolders {
    /// Whether a listing of `folder` in `bucket` may pay now.
    pub fn worth_listing(&self, bucket: &str, folder: &str, now: Instant) -> bool {
        let strikes = self.strikes.lock().unwrap_or_else(|p| p.into_inner());
        strikes
            .get(&folder_key(bucket, folder))
            .is_none_or(|&(n, until)| n < STRIKES || until <= now)
    }

    /// Records that a listing of `folder` held `yielded.0` of the `yielded.1`
    /// other objects it listed (or, with `None`, failed). Below [`MIN_LISTING_YIELD`]
    /// per [`LISTING_PAGE`] listed (none listed included) is a strike; a failure is
    /// all of them; at [`STRIKES`] the folder is left alone for
    /// [`SPARSE_FOLDER_MEMORY`]. A listing that pays clears them.
    pub fn record(
        &self,
        bucket: &str,
        folder: &str,
        yielded: Option<(usize, usize)>,
        now: Instant,
    ) {
        let mut strikes = self.strikes.lock().unwrap_or_else(|p| p.into_inner());
        let key = folder_key(bucket, folder);
        let pays = |(refreshed, listed): (usize, usize)| {
            listed > 0 && refreshed * LISTING_PAGE >= MIN_LISTING_YIELD * listed
        };
        if yielded.is_some_and(pays) {
            strikes.remove(&key);
            return;
        }
        make_room(&mut strikes, &key, |&(_, until)| until > now);
        let entry = strikes.entry(key).or_insert((0, now));
        // A strike older than the memory is forgotten.
        let earlier = if entry.1 > now { entry.0 } else { 0 };
        let n = if yielded.is_none() {
            STRIKES
        } else {
            (earlier + 1).min(STRIKES)
        };
        *entry = (n, now + SPARSE_FOLDER_MEMORY);
    }
}

/// The folders known to hold more than a page of keys: a revalidation there lists from
/// the key that came due. Elsewhere it lists from the folder's first key, so that one
/// page covers a whole small folder whichever of its keys came due first (in a
/// shuffled pass, listing from the due key would cover only the keys after it).
#[derive(Debug, Default)]
pub struct LargeFolders {
    until: Mutex<HashMap<String, Instant>>,
}

impl LargeFolders {
    /// Whether `folder` was seen to hold more than a page of keys lately.
    pub fn is_large(&self, bucket: &str, folder: &str, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        until
            .get(&folder_key(bucket, folder))
            .is_some_and(|&until| until > now)
    }

    /// Records that a listing from `folder`'s first key did not reach its end.
    pub fn mark(&self, bucket: &str, folder: &str, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        let key = folder_key(bucket, folder);
        make_room(&mut until, &key, |&until| until > now);
        until.insert(key, now + SPARSE_FOLDER_MEMORY);
    }
}

/// Room for `key` in a folder map of at most [`SPARSE_FOLDERS_KEPT`]: what is no longer
/// `live` goes first, everything if that is not enough.
fn make_room<V>(map: &mut HashMap<String, V>, key: &str, live: impl Fn(&V) -> bool) {
    if map.len() >= SPARSE_FOLDERS_KEPT && !map.contains_key(key) {
        map.retain(|_, v| live(v));
        if map.len() >= SPARSE_FOLDERS_KEPT {
            map.clear();
        }
    }
}

/// A folder's name among all buckets' (`bucket/folder`).
pub fn folder_key(bucket: &str, folder: &str) -> String {
    format!("{bucket}/{folder}")
}

/// Most listings in flight a due entry waits on before it lists on its own: each one
/// it joins starts where it would have started itself, so in a shuffled pass the due
/// entries of a large folder walk its pages one after another together.
pub const LISTING_JOINS: usize = 4;

/// A listing page in flight, by where it starts: its folder (as [`folder_key`]) and
/// its first [`PageStart`]. Entries that would start their page at the same place
/// wait on one listing; before 2026-12-05 they were keyed by folder alone, and those
/// a page did not cover, woken together, each listed the same next page.
pub fn listing_key(bucket: &str, folder: &str, start: PageStart<'_>) -> String {
    let folder = folder_key(bucket, folder);
    match start {
        PageStart::Folder => folder,
        PageStart::After(after) => format!("{folder}\n>{after}"),
        PageStart::Narrowed(prefix) => format!("{folder}\n^{prefix}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn info(etag: &str, size: u64, secs: u64) -> ObjectInfo {
        ObjectInfo {
            size,
            etag: etag.into(),
            last_modified: Some(UNIX_EPOCH + Duration::from_secs(secs)),
            content_type: None,
            headers: Default::default(),
        }
    }

    fn listed(key: &str, etag: &str, size: u64, millis: u64) -> ListedEntry {
        ListedEntry {
            key: key.into(),
            size,
            etag: etag.into(),
            last_modified: Some(UNIX_EPOCH + Duration::from_millis(millis)),
            content_type: None,
            content_md5: None,
            user_metadata: None,
        }
    }

    #[test]
    fn a_listing_starts_in_the_folder_just_before_the_key() {
        assert_eq!(listing_start("set/123.bin"), ("set/", "set/123.bi"));
        assert_eq!(listing_start("a/b/ü"), ("a/b/", "a/b/"));
        assert_eq!(listing_start("top"), ("", "to"));
        assert_eq!(listing_start("x"), ("", ""));
    }

    #[test]
    fn an_azure_listing_narrows_to_the_keys_that_differ_in_their_last_three_characters() {
        assert_eq!(narrowed_prefix("train/0001234", "train/"), "train/0001");
        assert_eq!(narrowed_prefix("train/ab", "train/"), "train/");
        assert_eq!(narrowed_prefix("d/éüö1", "d/"), "d/é");
        assert_eq!(narrowed_prefix("abc", ""), "");
        use PageStart::*;
        // S3: from the folder's first key, then from just before the key; only the
        // latter once the folder is known to hold more than a page.
        assert_eq!(
            page_starts("t/0001234", "t/", true, false, None),
            [Folder, After("t/000123")]
        );
        assert_eq!(
            page_starts("t/0001234", "t/", true, true, None),
            [After("t/000123")]
        );
        assert_eq!(page_starts("x", "", true, true, None), [Folder]);
        // A large S3 folder where a page ended before the key: from there first (a page
        // end at or past the key, or in another folder, is no use).
        assert_eq!(
            page_starts("t/0001234", "t/", true, true, Some("t/0000999")),
            [After("t/0000999"), After("t/000123")]
        );
        assert_eq!(
            page_starts("t/0001234", "t/", true, true, Some("t/0001234")),
            [After("t/000123")]
        );
        assert_eq!(
            page_starts("t/0001234", "t/", true, true, Some("s/9")),
            [After("t/000123")]
        );
        // Pages of a folder recorded where they ended; the last before a key is found.
        let ends = PageEnds::default();
        ends.note("b", "t/", "t/0000999");
        ends.note("b", "t/", "t/0001999");
        ends.note("b", "u/", "u/0000500");
        assert_eq!(
            ends.before("b", "t/", "t/0001234").as_deref(),
            Some("t/0000999")
        );
        assert_eq!(ends.before("b", "t/", "t/0000500"), None);
        assert_eq!(
            ends.before("b", "u/", "u/0009999").as_deref(),
            Some("u/0000500")
        );
        assert_eq!(ends.before("c", "t/", "t/0001234"), None);
        // Azure: the narrowed prefix instead; a key too short to narrow lists its folder.
        assert_eq!(
            page_starts("t/0001234", "t/", false, false, Some("t/0000999")),
            [Folder, Narrowed("t/0001")]
        );
        assert_eq!(
            page_starts("t/0001234", "t/", false, true, Some("t/0000999")),
            [Narrowed("t/0001")]
        );
        assert_eq!(page_starts("t/12", "t/", false, true, None), [Folder]);
    }

    #[test]
    fn a_version_is_its_etag_size_and_second_of_modification() {
        let held = info("\"e\"", 10, 100);
        assert!(same_version(&held, &listed("k", "\"e\"", 10, 100_999)));
        assert!(!same_version(&held, &listed("k", "\"f\"", 10, 100_000)));
        assert!(!same_version(&held, &listed("k", "\"e\"", 11, 100_000)));
        // The same bytes rewritten with new metadata a second later.
        assert!(!same_version(&held, &listed("k", "\"e\"", 10, 101_000)));
    }

    #[test]
    fn a_listing_vouches_only_for_what_was_learned_after_its_second_ended() {
        let held = info("\"e\"", 10, 100);
        let at = |millis: u64| UNIX_EPOCH + Duration::from_millis(millis);
        assert!(!listing_can_vouch(&held, at(100_500)));
        assert!(!listing_can_vouch(&held, at(102_999)));
        assert!(listing_can_vouch(&held, at(103_000)));
        let undated = ObjectInfo {
            last_modified: None,
            ..held
        };
        assert!(!listing_can_vouch(&undated, at(1_000_000)));
    }

    #[test]
    fn a_page_says_current_changed_gone_or_nothing() {
        let held = info("\"e\"", 10, 100);
        let page = |keys: &[&str], more: bool| ListResult {
            objects: keys
                .iter()
                .map(|k| {
                    listed(
                        k,
                        if *k == "d/x" { "\"new\"" } else { "\"e\"" },
                        10,
                        100_000,
                    )
                })
                .collect(),
            common_prefixes: Vec::new(),
            next_token: more.then(|| "token".into()),
        };
        assert_eq!(
            verdict(&page(&["d/k", "d/l"], true), "d/k", &held),
            PageVerdict::Current
        );
        assert_eq!(
            verdict(&page(&["d/x"], false), "d/x", &held),
            PageVerdict::Changed
        );
        // Absent from a last page, or absent where a later key shows its place.
        assert_eq!(
            verdict(&page(&["d/l"], false), "d/k", &held),
            PageVerdict::Gone
        );
        assert_eq!(
            verdict(&page(&["d/l"], true), "d/k", &held),
            PageVerdict::Gone
        );
        assert_eq!(verdict(&page(&[], false), "d/k", &held), PageVerdict::Gone);
        // A full page that stops before the key's place says nothing.
        assert_eq!(
            verdict(&page(&["d/j0", "d/j1"], true), "d/k", &held),
            PageVerdict::NotCovered
        );
    }

    #[test]
    fn a_folder_seen_large_is_listed_from_the_due_key_for_a_while() {
        let large = LargeFolders::default();
        let now = Instant::now();
        assert!(!large.is_large("b", "d/", now));
        large.mark("b", "d/", now);
        assert!(large.is_large("b", "d/", now));
        assert!(!large.is_large("b", "e/", now));
        assert!(!large.is_large("b", "d/", now + SPARSE_FOLDER_MEMORY));
    }

    #[test]
    fn a_folder_whose_listing_did_not_pay_is_left_alone_for_a_while() {
        let sparse = SparseFolders::default();
        let now = Instant::now();
        let full = |refreshed| Some((refreshed, LISTING_PAGE));
        assert!(sparse.worth_listing("b", "d/", now));
        // 15 of a full page is a strike; two in a row leave the folder alone.
        sparse.record("b", "d/", full(MIN_LISTING_YIELD - 1), now);
        assert!(sparse.worth_listing("b", "d/", now));
        sparse.record("b", "d/", full(MIN_LISTING_YIELD - 1), now);
        assert!(!sparse.worth_listing("b", "d/", now));
        assert!(sparse.worth_listing("b", "other/", now));
        assert!(sparse.worth_listing("b", "d/", now + SPARSE_FOLDER_MEMORY));
        // 16 of a full page, or 3 of a short last page of 20, pays and clears them.
        sparse.record("b", "d/", full(MIN_LISTING_YIELD), now);
        assert!(sparse.worth_listing("b", "d/", now));
        sparse.record("b", "e/", full(0), now);
        sparse.record("b", "e/", Some((3, 20)), now);
        sparse.record("b", "e/", full(0), now);
        assert!(sparse.worth_listing("b", "e/", now));
        // Nothing else listed, twice: nothing to gain. A failure at once.
        sparse.record("b", "f/", Some((0, 0)), now);
        sparse.record("b", "f/", Some((0, 0)), now);
        assert!(!sparse.worth_listing("b", "f/", now));
        sparse.record("b", "g/", None, now);
        assert!(!sparse.worth_listing("b", "g/", now));
    }
}
