//! The one line reader: splits a byte stream into lines for everything nxcc reads line by line
//! from a child (a tool's output, a worker's output and report pipe).

/// A line longer than this is delivered in pieces of this size (bounds the memory a child that
/// never writes a newline can make nxcc use).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Splits a byte stream into lines: `\n` ends a line (a `\r` before it is dropped too), bytes are
/// decoded as lossy UTF-8 per line, a line reaching [`MAX_LINE_BYTES`] is delivered as it is.
#[derive(Debug, Default)]
pub struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// Take `data`; deliver every line it completes.
    pub fn feed(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&str)) {
        while let Some(end) = data.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                emit_line(&data[..end], emit);
            } else {
                self.partial.extend_from_slice(&data[..end]);
                emit_line(&self.partial, emit);
                self.partial.clear();
            }
            data = &data[end + 1..];
        }
        self.partial.extend_from_slice(data);
        while self.partial.len() >= MAX_LINE_BYTES {
            let rest = self.partial.split_off(MAX_LINE_BYTES);
            emit_line(&self.partial, emit);
            self.partial = rest;
        }
    }

    /// The end of the stream: deliver an unterminated last line.
    pub fn finish(&mut self, emit: &mut dyn FnMut(&str)) {
        if !self.partial.is_empty() {
            emit_line(&self.partial, emit);
            self.partial.clear();
        }
    }
}

fn emit_line(bytes: &[u8], emit: &mut dyn FnMut(&str)) {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    emit(&String::from_utf8_lossy(bytes));
}

/// Read `reader` to its end, delivering its lines; a read error ends the stream like its end.
pub(crate) fn read_all(mut reader: impl std::io::Read, emit: &mut dyn FnMut(&str)) {
    let mut lines = Lines::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines.feed(&buf[..n], emit),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    lines.finish(emit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_read_to_lines_lossily_with_its_unterminated_end() {
        let mut got = Vec::new();
        read_all(&b"one\r\ntw\xffo\n\nlast"[..], &mut |l| {
            got.push(l.to_string())
        });
        assert_eq!(got, ["one", "tw\u{fffd}o", "", "last"]);
    }
}
