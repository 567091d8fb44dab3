//! The client's one SSE reader (WHATWG event-stream parsing, the subset MCP uses).
//!
//! Bytes are split into lines before they are decoded, so a character split across two network
//! frames arrives whole. Lines end in LF, CRLF or CR; a `data:` value loses exactly one leading
//! space; the `data` lines of one event are joined with LF; comments and other fields are
//! skipped; a blank line ends the event; one byte-order mark opening the stream is dropped. An
//! event (its data, or a line still being read) larger than the bound is an error rather than a
//! buffer that grows with whatever the server sends.
//!
//! The `id` and `retry` fields are kept for resuming a 2025-11-25 stream the server closed
//! early: the last event id is the one of the last event that ended (an `id` holding NUL is
//! ignored), and `retry` is taken only when it is all digits. Both carry over to the stream that
//! resumes, as in browsers: an event there without an `id` keeps the last one.

/// Why a stream could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTooLarge(pub usize);

impl std::fmt::Display for EventTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an SSE event is larger than {} bytes", self.0)
    }
}

/// Incremental parser: feed it bytes as they come, take the data of each complete event.
#[derive(Debug)]
pub struct EventReader {
    line: Vec<u8>,
    data: String,
    has_data: bool,
    /// The last byte fed was a CR: a following LF belongs to the same line end.
    after_cr: bool,
    /// How many bytes of a byte-order mark opened the stream; `None` once the stream's first
    /// bytes are known not to be one, or it was dropped.
    bom: Option<usize>,
    max_event: usize,
    /// The last `id` field read (WHATWG's last event ID buffer), which becomes the stream's
    /// last event id when an event ends.
    id_buffer: String,
    last_event_id: String,
    /// The reconnection time the server asked for, in milliseconds.
    retry_ms: Option<u64>,
}

/// U+FEFF in UTF-8: dropped where it opens a stream (WHATWG), where it would otherwise become
/// part of the first field's name and lose the first event.
const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

impl EventReader {
    /// A reader refusing events larger than `max_event` bytes.
    pub fn new(max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            bom: Some(0),
            max_event,
            id_buffer: String::new(),
            last_event_id: String::new(),
            retry_ms: None,
        }
    }

    /// The id of the last event that ended: what a reconnection sends as `Last-Event-ID`. Empty
    /// when the server gave none, or reset it.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// How long the server asked a client to wait before reconnecting.
    pub fn retry(&self) -> Option<std::time::Duration> {
        self.retry_ms.map(std::time::Duration::from_millis)
    }

    /// Readies the reader for the stream that resumes this one: what was left of an unfinished
    /// event is dropped (an event is whole or not at all), and the last event id and the retry
    /// wait are kept.
    pub fn reconnected(&mut self) {
        self.line.clear();
        self.data.clear();
        self.has_data = false;
        self.after_cr = false;
        self.bom = Some(0);
        self.id_buffer.clone_from(&self.last_event_id);
    }

    /// Feeds `bytes`; returns the data of every event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, EventTooLarge> {
        let mut events = Vec::new();
        for &byte in bytes {
            if let Some(matched) = self.bom {
                if byte == BYTE_ORDER_MARK[matched] {
                    self.bom = (matched + 1 < BYTE_ORDER_MARK.len()).then_some(matched + 1);
                    continue;
                }
                // Not a mark after all: the bytes held back are the line's first.
                self.bom = None;
                self.line.extend_from_slice(&BYTE_ORDER_MARK[..matched]);
            }
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(&mut events)?;
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                    if self.line.len() + self.data.len() > self.max_event {
                        return Err(EventTooLarge(self.max_event));
                    }
                }
            }
        }
        Ok(events)
    }

    fn end_line(&mut self, events: &mut Vec<String>) -> Result<(), EventTooLarge> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if self.last_event_id != self.id_buffer {
                self.last_event_id.clone_from(&self.id_buffer);
            }
            if self.has_data {
                events.push(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return Ok(()), // a comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        match field {
            b"id" if !value.contains(&0) => self.id_buffer = String::from_utf8_lossy(value).into_owned(),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits past what a u64 holds ask for longer than anyone waits.
                self.retry_ms = Some(std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX));
            }
            _ => {}
        }
        if field == b"data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(&String::from_utf8_lossy(value));
            self.has_data = true;
            // Measured again once decoded: each byte that is not UTF-8 became a three-byte
            // replacement character, and each line added a separator.
            if self.data.len() > self.max_event {
                return Err(EventTooLarge(self.max_event));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<String> {
        let mut reader = EventReader::new(1 << 20);
        chunks.iter().flat_map(|chunk| reader.push(chunk).unwrap()).collect()
    }

    #[test]
    fn a_character_split_across_frames_arrives_whole() {
        let text = "data: {\"t\":\"héllo ✓\"}\n\n".as_bytes();
        for cut in 1..text.len() {
            assert_eq!(all(&[&text[..cut], &text[cut..]]), ["{\"t\":\"héllo ✓\"}"], "cut at {cut}");
        }
    }

    #[test]
    fn line_ends_spaces_comments_and_multi_line_data() {
        assert_eq!(all(&[b"event: message\r\ndata: a\r\n\r\n"]), ["a"], "CRLF");
        assert_eq!(all(&[b"data: a\r", b"\ndata: b\r\r"]), ["a\nb"], "CRLF split across frames, then CR");
        assert_eq!(all(&[b"data:  two spaces\n\n"]), [" two spaces"], "exactly one leading space is stripped");
        assert_eq!(all(&[b"data:x\n\n"]), ["x"]);
        assert_eq!(all(&[b": keep-alive\n\ndata: 1\ndata: 2\n\n"]), ["1\n2"], "data lines join with LF");
        assert_eq!(all(&[b"data\n\n"]), [""], "a bare data field is an empty line of data");
        assert_eq!(all(&[b"id: 7\nretry: 10\n\n"]), Vec::<String>::new(), "an event without data is none");
        assert_eq!(all(&[b"data: open"]), Vec::<String>::new(), "an unfinished event is not delivered");
    }

    #[test]
    fn one_byte_order_mark_opening_the_stream_is_dropped() {
        let stream = "\u{feff}data: first\n\ndata: second\n\n".as_bytes();
        for cut in 0..stream.len() {
            assert_eq!(all(&[&stream[..cut], &stream[cut..]]), ["first", "second"], "cut at {cut}");
        }
        assert_eq!(all(&["\u{feff}\u{feff}data: x\n\n".as_bytes()]), Vec::<String>::new(), "only one is dropped");
        assert_eq!(all(&[b"data: \xEF\xBB\xBFx\n\n"]), ["\u{feff}x"], "one inside the stream is data");
        assert_eq!(all(&[b"\xEF\xBBdata: x\n\n"]), Vec::<String>::new(), "part of a mark is not one");
        assert_eq!(all(&[b"\xEF", b"data: x\n\ndata: y\n\n"]), ["y"], "held bytes go back to the line");
    }

    #[test]
    fn the_last_event_id_and_the_retry_wait_are_kept_for_a_reconnection() {
        let mut reader = EventReader::new(1 << 20);
        assert_eq!(reader.last_event_id(), "");
        assert_eq!(reader.retry(), None);
        // A priming event: an id and an empty data field, no message.
        assert_eq!(reader.push(b"id: a1\nretry: 250\ndata:\n\n").unwrap(), [""]);
        assert_eq!((reader.last_event_id(), reader.retry()), ("a1", Some(std::time::Duration::from_millis(250))));
        assert_eq!(reader.push(b"id: a2\ndata: x\n\nid: a3\ndata: y").unwrap(), ["x"]);
        assert_eq!(reader.last_event_id(), "a2", "the id of an event that has not ended is not yet the last");
        reader.reconnected();
        assert_eq!(reader.push(b"\n\ndata: z\n\n").unwrap(), ["z"], "what was left of a3 was dropped");
        assert_eq!(reader.last_event_id(), "a2", "an event without an id keeps the last one");
        assert_eq!(reader.push(b"id: a\0b\nretry: 1x\nretry:\ndata: w\n\n").unwrap(), ["w"]);
        assert_eq!(reader.last_event_id(), "a2", "an id holding NUL is ignored");
        assert_eq!(reader.retry(), Some(std::time::Duration::from_millis(250)), "a retry that is not all digits too");
        assert_eq!(reader.push(b"retry: 99999999999999999999999\nid\n\n").unwrap(), Vec::<String>::new());
        assert_eq!(reader.last_event_id(), "", "an empty id resets it");
        assert_eq!(reader.retry(), Some(std::time::Duration::from_millis(u64::MAX)));
    }

    #[test]
    fn an_event_over_the_bound_is_an_error() {
        let mut reader = EventReader::new(16);
        assert_eq!(reader.push(b"data: 0123456789\n\n").unwrap(), ["0123456789"]);
        assert_eq!(reader.push(b"data: 0123456789abcdef"), Err(EventTooLarge(16)), "one long line");
        let mut reader = EventReader::new(16);
        assert_eq!(reader.push(b"data: 01234567\ndata: 01234567\n"), Err(EventTooLarge(16)), "many short lines");
        // Bytes that are not UTF-8 grow threefold when decoded: the bound is on what is kept.
        let mut reader = EventReader::new(16);
        assert_eq!(reader.push(b"data: \xff\xff\xff\xff\xff\xff\n"), Err(EventTooLarge(16)), "decoded, it is 18 bytes");
        let mut reader = EventReader::new(16);
        assert_eq!(reader.push(b"data: \xff\xff\xff\xff\xff\n\n").unwrap(), ["\u{fffd}".repeat(5)], "15 bytes pass");
        let mut reader = EventReader::new(4);
        assert_eq!(reader.push(b"data\ndata\ndata\ndata\ndata\ndata\n"), Err(EventTooLarge(4)), "empty lines join");
    }
}
