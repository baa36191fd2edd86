//! The committed conformance vectors (`tests/vectors/wire_v1.txt`) must be
//! exactly what `talon_core::vectors` generates, and every committed vector
//! must decode back to the value it was generated from.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use talon_core::vectors::{GENERATE_COMMAND, Vector, render, vector_set};
use talon_core::wire::{BulkKind, Event, FrameDecoder, FrameHeader, HEADER_LEN, IngestRequest};
use talon_core::{BlockId, Message, ObjectId, ObjectVersion, PresentBitmap};

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/wire_v1.txt")
}

fn committed() -> String {
    let path = committed_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nGenerate it from the workspace root with:\n  {GENERATE_COMMAND}",
            path.display()
        )
    })
}

#[test]
fn committed_vectors_match_the_generator() {
    let generated = render(&vector_set().unwrap());
    let committed = committed().replace("\r\n", "\n");
    if generated == committed {
        return;
    }
    let first_diff = generated
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (g, c))| g != c);
    let detail = match first_diff {
        Some((i, (g, c))) => format!(
            "first difference at line {}:\n  generated: {g}\n  committed: {c}",
            i + 1
        ),
        None => format!(
            "one is a prefix of the other ({} generated lines, {} committed)",
            generated.lines().count(),
            committed.lines().count()
        ),
    };
    panic!(
        "{} is out of date: the wire encoding or the vector set changed.\n{detail}\n\
         If the change is intended (it breaks compatibility with deployed peers \
         unless only vectors were added), regenerate from the workspace root with:\n  {GENERATE_COMMAND}",
        committed_path().display()
    );
}

#[test]
fn vector_names_are_unique() {
    let vectors = vector_set().unwrap();
    let names: BTreeSet<String> = vectors.iter().map(Vector::name).collect();
    assert_eq!(names.len(), vectors.len());
}

/// Decodes a whole byte string with the incremental decoder, reassembling
/// bulk frames. Returns the first error, if any.
fn decode_stream(bytes: &[u8]) -> Result<Vec<(FrameHeader, Message)>, talon_core::Error> {
    let mut decoder = FrameDecoder::new();
    let mut input = bytes;
    let mut out = Vec::new();
    let mut bulk = None;
    while let Some(event) = decoder.decode(&mut input)? {
        match event {
            Event::Frame(f) => out.push((f.header, f.message)),
            Event::BulkStart(start) => bulk = Some((start, Vec::new())),
            Event::BulkData(d) => bulk.as_mut().unwrap().1.extend_from_slice(d),
            Event::BulkEnd => {
                let (start, data) = bulk.take().unwrap();
                let msg = match start.kind {
                    BulkKind::ReadRangeReply => Message::ReadRangeReply(data),
                    BulkKind::Ingest(meta) => Message::Ingest(IngestRequest { meta, data }),
                };
                out.push((start.header, msg));
            }
        }
    }
    assert!(
        decoder.is_idle(),
        "stream ended inside a frame: {} bytes",
        bytes.len()
    );
    Ok(out)
}

#[test]
fn committed_vectors_decode_back() {
    let vectors = vector_set().unwrap();
    let by_name: HashMap<String, &Vector> = vectors.iter().map(|v| (v.name(), v)).collect();
    let text = committed();
    let mut seen = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(fields.len() >= 3, "malformed vector line {line:?}");
        let name = fields[1];
        let fail = |e: talon_core::Error| -> ! {
            panic!("committed vector {name:?} does not decode: {e}")
        };
        seen += 1;
        match fields[0] {
            "frame" => {
                let bytes = hex::decode(fields[2]).unwrap();
                let Some(Vector::Frame {
                    request_id,
                    message,
                    flags,
                    ..
                }) = by_name.get(fields[1])
                else {
                    panic!("no frame vector named {}", fields[1]);
                };
                let header = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap())
                    .unwrap_or_else(|e| fail(e));
                assert_eq!(header.request_id(), *request_id, "{line}");
                assert!(header.flags().contains(*flags), "{line}");
                let decoded =
                    Message::decode(&header, &bytes[HEADER_LEN..]).unwrap_or_else(|e| fail(e));
                assert_eq!(&decoded, message, "{}", fields[1]);
                let streamed = decode_stream(&bytes).unwrap_or_else(|e| fail(e));
                assert_eq!(streamed, vec![(header, decoded)], "{}", fields[1]);
            }
            "header" => {
                let bytes = hex::decode(fields[2]).unwrap();
                let Some(Vector::Header { header, .. }) = by_name.get(fields[1]) else {
                    panic!("no header vector named {}", fields[1]);
                };
                let decoded =
                    FrameHeader::decode(bytes[..].try_into().unwrap()).unwrap_or_else(|e| fail(e));
                assert_eq!(&decoded, header);
            }
            "reject" => {
                let bytes = hex::decode(fields[2]).unwrap();
                let Some(Vector::Reject { error, .. }) = by_name.get(fields[1]) else {
                    panic!("no reject vector named {}", fields[1]);
                };
                assert_eq!(
                    decode_stream(&bytes).err().as_ref(),
                    Some(error),
                    "{}",
                    fields[1]
                );
            }
            "key" => {
                let object = ObjectId::from_key_path(fields[1]).unwrap();
                assert_eq!(object.key_path(), fields[1]);
                assert_eq!(object.backend().key_prefix(), fields[2]);
                let from_names = match &fields[3..] {
                    [bucket, path] => ObjectId::s3(*bucket, *path).unwrap(),
                    [account, container, path] => {
                        ObjectId::azure(*account, *container, *path).unwrap()
                    }
                    other => panic!("bad key line {other:?}"),
                };
                assert_eq!(object, from_names);
                assert!(matches!(
                    by_name.get(fields[1]),
                    Some(Vector::KeyPath { .. })
                ));
            }
            "block" => {
                let block = BlockId::new(
                    ObjectId::from_key_path(fields[1]).unwrap(),
                    ObjectVersion::new(fields[2]).unwrap(),
                    fields[3].parse().unwrap(),
                    fields[4].parse().unwrap(),
                )
                .unwrap();
                assert_eq!(block.storage_name(), fields[5], "{line}");
                assert_eq!(hex::encode(block.placement_key()), fields[6], "{line}");
                assert!(by_name.contains_key(&block.to_string()));
            }
            "bitmap" => {
                let pages: u32 = fields[2].parse().unwrap();
                let mut bitmap = PresentBitmap::new(pages).unwrap();
                if fields[3] != "-" {
                    for page in fields[3].split(',') {
                        bitmap.set(page.parse().unwrap()).unwrap();
                    }
                }
                let bytes = hex::decode(fields[4]).unwrap();
                assert_eq!(PresentBitmap::from_bytes(pages, &bytes).unwrap(), bitmap);
                assert_eq!(bitmap.to_bytes(), bytes);
                assert!(matches!(
                    by_name.get(fields[1]),
                    Some(Vector::Bitmap { .. })
                ));
            }
            other => panic!("unknown vector kind {other:?} in line {line:?}"),
        }
    }
    assert_eq!(seen, vectors.len(), "every vector is in the committed file");
}

#[test]
fn set_covers_every_message_type_and_an_error_reply() {
    use talon_core::wire::MessageType;
    let vectors = vector_set().unwrap();
    let types: BTreeSet<u8> = vectors
        .iter()
        .filter_map(|v| match v {
            Vector::Frame { message, .. } => Some(message.message_type().as_u8()),
            _ => None,
        })
        .collect();
    for ty in MessageType::ALL {
        assert!(types.contains(&ty.as_u8()), "{ty:?} has no vector");
    }
    assert!(vectors.iter().any(|v| matches!(v, Vector::Header { .. })));
}
