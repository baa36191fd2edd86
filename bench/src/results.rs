//! Where the gateway benches write their JSON Lines: one file under
//! `bench/results/` (ignored by git), replaced by each run, and optionally
//! stdout as well.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::harness_error::{HarnessError, HarnessResult};

/// A JSON Lines sink.
#[derive(Debug)]
pub struct JsonLines {
    path: PathBuf,
    file: File,
    stdout: bool,
}

impl JsonLines {
    /// Creates (or truncates) `path`, making its folder; with `stdout`, every
    /// line is also printed.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the file cannot be created.
    pub fn create(path: &Path, stdout: bool) -> HarnessResult<JsonLines> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
        }
        let file = File::create(path)
            .map_err(|e| HarnessError::io(format!("creating {}", path.display()), e))?;
        Ok(JsonLines {
            path: path.to_owned(),
            file,
            stdout,
        })
    }

    /// Writes one line.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the line cannot be encoded or written.
    pub fn emit(&mut self, value: &impl Serialize) -> HarnessResult<()> {
        let line = serde_json::to_string(value)
            .map_err(|e| HarnessError::io("encoding a result line", std::io::Error::other(e)))?;
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .map_err(|e| HarnessError::io(format!("writing {}", self.path.display()), e))?;
        if self.stdout {
            println!("{line}");
        }
        Ok(())
    }

    /// The file written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The repository root the bench was built from (`bench/..`), for the
/// default results path and the commit.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_one_per_value() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("sub/out.jsonl");
        let mut out = JsonLines::create(&path, false).unwrap_or_else(|e| panic!("{e}"));
        out.emit(&serde_json::json!({"a": 1}))
            .unwrap_or_else(|e| panic!("{e}"));
        out.emit(&serde_json::json!({"b": [2]}))
            .unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "{\"a\":1}\n{\"b\":[2]}\n");
    }
}
