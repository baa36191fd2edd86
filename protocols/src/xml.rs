//! A small XML writer for the response bodies both protocols use.
//!
//! The bodies are flat and known in advance, so a writer that escapes text and keeps the
//! tags balanced is all they need; parsing uses quick-xml's serde support instead.

use quick_xml::escape::escape;

/// Builds one XML document.
#[derive(Debug)]
pub struct XmlWriter {
    buf: String,
    open: Vec<&'static str>,
}

impl XmlWriter {
    /// Starts a document with the XML declaration (`encoding` as the protocol spells it).
    pub fn new(encoding: &str) -> XmlWriter {
        XmlWriter {
            buf: format!("<?xml version=\"1.0\" encoding=\"{encoding}\"?>"),
            open: Vec::new(),
        }
    }

    /// Opens `<tag>` or, with a namespace, `<tag xmlns="ns">`.
    pub fn open(&mut self, tag: &'static str, xmlns: Option<&str>) -> &mut Self {
        self.buf.push('<');
        self.buf.push_str(tag);
        if let Some(ns) = xmlns {
            self.buf.push_str(" xmlns=\"");
            self.buf.push_str(&escape(ns));
            self.buf.push('"');
        }
        self.buf.push('>');
        self.open.push(tag);
        self
    }

    /// Opens `<tag a="x" b="y">` with escaped attribute values.
    pub fn open_with_attrs(&mut self, tag: &'static str, attrs: &[(&str, &str)]) -> &mut Self {
        self.buf.push('<');
        self.buf.push_str(tag);
        for (name, value) in attrs {
            self.buf
                .push_str(&format!(" {name}=\"{}\"", escape(*value)));
        }
        self.buf.push('>');
        self.open.push(tag);
        self
    }

    /// Closes the innermost open tag.
    pub fn close(&mut self) -> &mut Self {
        if let Some(tag) = self.open.pop() {
            self.buf.push_str("</");
            self.buf.push_str(tag);
            self.buf.push('>');
        }
        self
    }

    /// Writes `<tag>text</tag>` with `text` escaped.
    pub fn text(&mut self, tag: &str, text: &str) -> &mut Self {
        self.buf.push('<');
        self.buf.push_str(tag);
        self.buf.push('>');
        self.buf.push_str(&escape(text));
        self.buf.push_str("</");
        self.buf.push_str(tag);
        self.buf.push('>');
        self
    }

    /// Writes `<tag>text</tag>` when `text` is present.
    pub fn opt_text(&mut self, tag: &str, text: Option<&str>) -> &mut Self {
        if let Some(t) = text {
            self.text(tag, t);
        }
        self
    }

    /// Writes an empty element `<tag/>`.
    pub fn empty(&mut self, tag: &str) -> &mut Self {
        self.buf.push('<');
        self.buf.push_str(tag);
        self.buf.push_str("/>");
        self
    }

    /// Closes every open tag and returns the document.
    pub fn finish(mut self) -> String {
        while !self.open.is_empty() {
            self.close();
        }
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_balances() {
        let mut w = XmlWriter::new("UTF-8");
        w.open("A", Some("urn:x"))
            .text("B", "1 < 2 & \"q\"")
            .open("C", None)
            .empty("D");
        assert_eq!(
            w.finish(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><A xmlns=\"urn:x\"><B>1 &lt; 2 &amp; &quot;q&quot;</B><C><D/></C></A>"
        );
    }
}
