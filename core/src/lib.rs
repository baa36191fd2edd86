//! `talon-core`: Talon's shared vocabulary.
//!
//! This crate owns what every other Talon crate must agree on byte for byte:
//!
//! - [`identity`]: object identity ([`Backend`], [`ObjectId`],
//!   [`ObjectVersion`]), key paths (`s3/<bucket>/<path>`,
//!   `az/<account>/<container>/<path>`) and [`BlockId`] with its placement
//!   key and storage name;
//! - [`block`]: block and page math ([`BlockGeometry`], range splitting into
//!   [`BlockSpan`]s);
//! - [`bitmap`]: the present-page [`PresentBitmap`] and its persistent
//!   encoding;
//! - [`wire`]: the worker wire protocol (frame header, messages, error codes)
//!   and its sans-IO codec, including an incremental [`wire::FrameDecoder`];
//! - [`cluster_auth`]: the cluster secret and what is proved with it (the data
//!   plane's Hello, the coordinator API's signatures);
//! - [`size`]: byte sizes as written in flags (`64GiB`);
//! - [`vectors`]: the conformance vectors that pin all of the above.
//!
//! It does not own I/O of any kind: no sockets, files, clocks or async
//! runtime. Callers feed it bytes and numbers and get back values, byte
//! buffers or a typed [`Error`] (one enum for the whole crate). Decoding never
//! panics on untrusted input and allocates no more than the documented caps.

pub mod bitmap;
pub mod block;
pub mod cluster_auth;
pub mod duration;
pub mod error;
pub mod identity;
pub mod size;
pub mod vectors;
pub mod wire;

pub use bitmap::PresentBitmap;
pub use block::{BlockGeometry, BlockSpan, DEFAULT_BLOCK_SIZE, DEFAULT_PAGE_SIZE, Spans};
pub use duration::parse_duration;
pub use error::{Error, NameField, NameProblem, error_line};
pub use identity::{Backend, BlockId, Namespace, ObjectId, ObjectVersion, canonical_etag};
pub use size::parse_byte_size;
pub use wire::{ErrorCode, Message};
