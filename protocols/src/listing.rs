//! The listing semantics both protocols share: prefix, delimiter roll-up into common
//! prefixes, a resume marker, and a page size that counts a common prefix as one entry.
//!
//! S3's ListObjects (V1 `marker`, V2 `start-after` / `continuation-token`) and Azure's
//! List Blobs (`marker`) differ only in names; a server that holds keys in sorted order
//! runs them all through [`paginate`].

/// What a listing request asks for.
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    /// Only keys starting with this prefix.
    pub prefix: &'a str,
    /// Roll keys up at the first occurrence of this delimiter after the prefix.
    pub delimiter: Option<&'a str>,
    /// Resume after this entry (a key or a common prefix from an earlier page); exclusive.
    pub marker: Option<&'a str>,
    /// At most this many entries (keys plus common prefixes).
    pub max_keys: usize,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage<T> {
    /// Entries whose keys do not roll up, in key order.
    pub entries: Vec<T>,
    /// Common prefixes, in order, each ending with the delimiter.
    pub common_prefixes: Vec<String>,
    /// Whether more entries follow this page.
    pub is_truncated: bool,
    /// The last key or prefix on this page: pass it back as `marker` for the next page.
    pub next_marker: Option<String>,
}

impl<T> ListPage<T> {
    /// The same page with each entry converted (to a protocol's listing entry type).
    pub fn map_entries<U>(self, f: impl FnMut(T) -> U) -> ListPage<U> {
        ListPage {
            entries: self.entries.into_iter().map(f).collect(),
            common_prefixes: self.common_prefixes,
            is_truncated: self.is_truncated,
            next_marker: self.next_marker,
        }
    }
}

/// Pages through `items` (sorted ascending by key, as raw UTF-8 bytes, which is S3's and
/// Azure's order), where `key` gives each item's key.
pub fn paginate<T>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> &str,
    query: &ListQuery<'_>,
) -> ListPage<T> {
    let mut page = ListPage {
        entries: Vec::new(),
        common_prefixes: Vec::new(),
        is_truncated: false,
        next_marker: None,
    };
    let delimiter = query.delimiter.filter(|d| !d.is_empty());
    let mut taken = 0usize;
    for item in items {
        let k = key(&item);
        if !k.starts_with(query.prefix) {
            continue;
        }
        let rolled = delimiter.and_then(|d| {
            let rest = &k[query.prefix.len()..];
            rest.find(d).map(|i| &k[..query.prefix.len() + i + d.len()])
        });
        let position = rolled.unwrap_or(k);
        if let Some(marker) = query.marker {
            // Skip everything at or before the marker, and keys that roll up into a
            // common prefix the marker already returned.
            if position <= marker {
                continue;
            }
        }
        if let Some(prefix) = rolled {
            if page.common_prefixes.last().is_some_and(|p| p == prefix) {
                continue;
            }
            if taken == query.max_keys {
                page.is_truncated = true;
                break;
            }
            page.common_prefixes.push(prefix.to_owned());
            page.next_marker = Some(prefix.to_owned());
        } else {
            if taken == query.max_keys {
                page.is_truncated = true;
                break;
            }
            page.next_marker = Some(k.to_owned());
            page.entries.push(item);
        }
        taken += 1;
    }
    if !page.is_truncated {
        page.next_marker = None;
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(keys: &[&str], q: ListQuery<'_>) -> (Vec<String>, Vec<String>, Option<String>) {
        let page = paginate(keys.iter().map(|k| k.to_string()), |k| k.as_str(), &q);
        (page.entries, page.common_prefixes, page.next_marker)
    }

    const KEYS: &[&str] = &["a/1", "a/2", "b", "c/x/1", "c/y", "d"];

    #[test]
    fn delimiter_rolls_up_and_counts_prefixes_once() {
        let (e, p, next) = list(
            KEYS,
            ListQuery {
                delimiter: Some("/"),
                max_keys: 1000,
                ..Default::default()
            },
        );
        assert_eq!(e, ["b", "d"]);
        assert_eq!(p, ["a/", "c/"]);
        assert_eq!(next, None);
    }

    #[test]
    fn pages_resume_after_a_common_prefix() {
        let q = |marker| ListQuery {
            delimiter: Some("/"),
            max_keys: 1,
            marker,
            ..Default::default()
        };
        let (e, p, next) = list(KEYS, q(None));
        assert!(e.is_empty());
        assert_eq!(p, ["a/"]);
        assert_eq!(next.as_deref(), Some("a/"));
        let (e, p, next) = list(KEYS, q(Some("a/")));
        assert_eq!(e, ["b"]);
        assert!(p.is_empty());
        assert_eq!(next.as_deref(), Some("b"));
        let (_, p, next) = list(KEYS, q(Some("b")));
        assert_eq!(p, ["c/"]);
        let (e, _, next2) = list(KEYS, q(next.as_deref()));
        assert_eq!(e, ["d"]);
        assert_eq!(next2, None);
    }

    #[test]
    fn prefix_and_nested_delimiter() {
        let (e, p, _) = list(
            KEYS,
            ListQuery {
                prefix: "c/",
                delimiter: Some("/"),
                max_keys: 10,
                ..Default::default()
            },
        );
        assert_eq!(e, ["c/y"]);
        assert_eq!(p, ["c/x/"]);
    }

    #[test]
    fn zero_max_keys_is_an_empty_untruncated_page_when_nothing_matches() {
        let page = paginate(Vec::<String>::new(), |k| k.as_str(), &ListQuery::default());
        assert!(!page.is_truncated);
        let page = paginate(vec!["a".to_string()], |k| k.as_str(), &ListQuery::default());
        assert!(page.is_truncated && page.entries.is_empty());
    }

    proptest! {
        /// Walking all pages yields exactly what one big page yields.
        #[test]
        fn paging_is_lossless(mut keys in proptest::collection::btree_set("[ab/]{1,6}", 0..40), page_size in 1usize..7, use_delim: bool) {
            let keys: Vec<String> = std::mem::take(&mut keys).into_iter().collect();
            let delimiter = use_delim.then_some("/");
            let all = paginate(keys.clone(), |k| k.as_str(), &ListQuery { delimiter, max_keys: usize::MAX, ..Default::default() });
            let (mut entries, mut prefixes, mut marker) = (Vec::new(), Vec::new(), None::<String>);
            for _ in 0..100 {
                let page = paginate(keys.clone(), |k| k.as_str(), &ListQuery { delimiter, max_keys: page_size, marker: marker.as_deref(), ..Default::default() });
                prop_assert!(page.entries.len() + page.common_prefixes.len() <= page_size);
                entries.extend(page.entries);
                prefixes.extend(page.common_prefixes);
                if !page.is_truncated { break; }
                marker = page.next_marker;
            }
            prop_assert_eq!(entries, all.entries);
            prop_assert_eq!(prefixes, all.common_prefixes);
        }
    }
}
