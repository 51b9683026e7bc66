//! The fork server's messages: one [`Msg`] type, written by [`Msg::encode`] and read by
//! [`Msg::decode`] and nowhere else. Every message opens with the protocol's [`VERSION`] and a
//! kind byte; numbers are little-endian. A message of another version, of an unknown kind, cut
//! short or with bytes after its end is refused ([`WireError`]), never read as something else.
//!
//! | kind | message | then | descriptors (`SCM_RIGHTS`) |
//! |---|---|---|---|
//! | `S` | [`Msg::Spawn`] | id `u64`, payload: `0` + its bytes, or `1` + its length `u64` | report pipe, stdout, stderr (+ the payload's memfd) |
//! | `P` | [`Msg::Started`] | id `u64`, pid `u32` | the worker's pidfd |
//! | `F` | [`Msg::Failed`] | id `u64`, errno `i32` | — |
//! | `X` | [`Msg::Exited`] | id `u64`, wait status `i32`, peak RSS in KiB `u64` | — |
//! | `R` | [`Msg::Refused`] | id `u64` (`0`: unknown), the reason in UTF-8 | — |

/// The protocol's version, the first byte of every message. (The format before it had no
/// version byte: its first byte, a kind letter, reads as a version this one is not.)
pub const VERSION: u8 = 2;

/// The longest reason a [`Msg::Refused`] carries (a longer one is cut at a character boundary).
pub const WHY_MAX: usize = 1024;

const SPAWN: u8 = b'S';
const STARTED: u8 = b'P';
const FAILED: u8 = b'F';
const EXITED: u8 = b'X';
const REFUSED: u8 = b'R';

const INLINE: u8 = 0;
const MEMFD: u8 = 1;

/// Where a request's payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// In the message itself.
    Inline(Vec<u8>),
    /// In a sealed memfd, the request's fourth descriptor, of this many bytes (a payload larger
    /// than one datagram).
    Memfd {
        /// The payload's length.
        len: u64,
    },
}

/// One message between the caller and the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Caller → helper: start a worker on this payload, with the descriptors given.
    Spawn {
        /// The request's id (never 0).
        id: u64,
        /// The payload, or where it is.
        payload: Payload,
    },
    /// Helper → caller: the worker runs (its pidfd comes with the message).
    Started {
        /// The request's id.
        id: u64,
        /// The worker's pid.
        pid: u32,
    },
    /// Helper → caller: no worker was started (the fork, or its pidfd, failed).
    Failed {
        /// The request's id.
        id: u64,
        /// The system's error number.
        errno: i32,
    },
    /// Helper → caller: the worker ended.
    Exited {
        /// The request's id.
        id: u64,
        /// Its raw wait status.
        status: i32,
        /// Its peak resident set, in KiB.
        max_rss_kb: u64,
    },
    /// Helper → caller: a request the helper does not take (another version, garbage, the wrong
    /// descriptors, a payload it cannot read); nothing was started for it.
    Refused {
        /// The request's id, `0` when it could not be read.
        id: u64,
        /// Why.
        why: String,
    },
}

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Another protocol version.
    #[error("a message of protocol version {theirs}, while this nxcc speaks version {VERSION}")]
    Version {
        /// The version the message says.
        theirs: u8,
    },
    /// Fewer bytes than the message's kind needs.
    #[error("a message cut short ({0} bytes)")]
    Truncated(usize),
    /// An unknown kind byte.
    #[error("a message of unknown kind {0:#04x}")]
    Kind(u8),
    /// An unknown payload location.
    #[error("a request whose payload is of unknown kind {0:#04x}")]
    PayloadKind(u8),
    /// Bytes after the message's end.
    #[error("a message with {0} bytes after its end")]
    Trailing(usize),
    /// Larger than the receiving buffer (cut by the socket).
    #[error("a message larger than {0} bytes")]
    TooLong(usize),
    /// More descriptors than a message carries (cut by the socket).
    #[error("a message with more than {0} descriptors")]
    TooManyFds(usize),
}

impl Msg {
    /// The request this message is about.
    pub fn id(&self) -> u64 {
        match self {
            Msg::Spawn { id, .. }
            | Msg::Started { id, .. }
            | Msg::Failed { id, .. }
            | Msg::Exited { id, .. }
            | Msg::Refused { id, .. } => *id,
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![VERSION];
        match self {
            Msg::Spawn { id, payload } => {
                b.push(SPAWN);
                b.extend_from_slice(&id.to_le_bytes());
                match payload {
                    Payload::Inline(bytes) => {
                        b.push(INLINE);
                        b.extend_from_slice(bytes);
                    }
                    Payload::Memfd { len } => {
                        b.push(MEMFD);
                        b.extend_from_slice(&len.to_le_bytes());
                    }
                }
            }
            Msg::Started { id, pid } => {
                b.push(STARTED);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&pid.to_le_bytes());
            }
            Msg::Failed { id, errno } => {
                b.push(FAILED);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&errno.to_le_bytes());
            }
            Msg::Exited {
                id,
                status,
                max_rss_kb,
            } => {
                b.push(EXITED);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(&status.to_le_bytes());
                b.extend_from_slice(&max_rss_kb.to_le_bytes());
            }
            Msg::Refused { id, why } => {
                b.push(REFUSED);
                b.extend_from_slice(&id.to_le_bytes());
                b.extend_from_slice(cut(why, WHY_MAX).as_bytes());
            }
        }
        b
    }

    /// Read one message: all of `bytes`, and nothing else.
    pub fn decode(bytes: &[u8]) -> Result<Msg, WireError> {
        let mut r = Reader { b: bytes, at: 0 };
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version { theirs: version });
        }
        let kind = r.u8()?;
        let id = r.u64()?;
        let msg = match kind {
            SPAWN => {
                let payload = match r.u8()? {
                    INLINE => Payload::Inline(r.rest().to_vec()),
                    MEMFD => Payload::Memfd { len: r.u64()? },
                    k => return Err(WireError::PayloadKind(k)),
                };
                Msg::Spawn { id, payload }
            }
            STARTED => Msg::Started { id, pid: r.u32()? },
            FAILED => Msg::Failed {
                id,
                errno: r.u32()? as i32,
            },
            EXITED => Msg::Exited {
                id,
                status: r.u32()? as i32,
                max_rss_kb: r.u64()?,
            },
            REFUSED => Msg::Refused {
                id,
                why: String::from_utf8_lossy(r.rest()).into_owned(),
            },
            k => return Err(WireError::Kind(k)),
        };
        r.end()?;
        Ok(msg)
    }

    /// The id of a request that is not read as a whole, when its first bytes say it (to refuse
    /// that request by its id).
    pub(crate) fn id_of(bytes: &[u8]) -> u64 {
        let mut r = Reader { b: bytes, at: 0 };
        match (r.u8(), r.u8(), r.u64()) {
            (Ok(VERSION), Ok(_), Ok(id)) => id,
            _ => 0,
        }
    }
}

/// `s`, cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A cursor over a message's bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let bytes = self
            .b
            .get(self.at..self.at + N)
            .ok_or(WireError::Truncated(self.b.len()))?;
        self.at += N;
        Ok(bytes.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn rest(&mut self) -> &'a [u8] {
        let rest = &self.b[self.at..];
        self.at = self.b.len();
        rest
    }
    fn end(&self) -> Result<(), WireError> {
        match self.b.len() - self.at {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn payload() -> impl Strategy<Value = Payload> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512).prop_map(Payload::Inline),
            any::<u64>().prop_map(|len| Payload::Memfd { len }),
        ]
    }

    fn msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (any::<u64>(), payload()).prop_map(|(id, payload)| Msg::Spawn { id, payload }),
            (any::<u64>(), any::<u32>()).prop_map(|(id, pid)| Msg::Started { id, pid }),
            (any::<u64>(), any::<i32>()).prop_map(|(id, errno)| Msg::Failed { id, errno }),
            (any::<u64>(), any::<i32>(), any::<u64>()).prop_map(|(id, status, max_rss_kb)| {
                Msg::Exited {
                    id,
                    status,
                    max_rss_kb,
                }
            }),
            (any::<u64>(), "\\PC{0,300}").prop_map(|(id, why)| Msg::Refused { id, why }),
        ]
    }

    proptest! {
        #[test]
        fn every_message_reads_back_as_itself(m in msg()) {
            let bytes = m.encode();
            prop_assert_eq!(bytes[0], VERSION);
            prop_assert_eq!(Msg::decode(&bytes), Ok(m.clone()));
            prop_assert_eq!(Msg::id_of(&bytes), m.id());
        }

        /// A message cut anywhere is refused — except a request's inline payload or a reason,
        /// whose end is the message's: cut there, it reads as a shorter one of the same kind.
        #[test]
        fn a_message_cut_short_is_refused(m in msg(), cut_at in any::<prop::sample::Index>()) {
            let bytes = m.encode();
            let n = cut_at.index(bytes.len());
            let open_ended = match &m {
                Msg::Spawn { payload: Payload::Inline(_), .. } => 11,
                Msg::Refused { .. } => 10,
                _ => usize::MAX,
            };
            let got = Msg::decode(&bytes[..n]);
            if n < open_ended {
                prop_assert!(matches!(got, Err(WireError::Truncated(_))), "{:?}", got);
            }
        }

        /// Bytes that are not a message are refused (or read as one), never a panic; whatever
        /// they read as writes back as exactly them (a reason's bytes that are not UTF-8 aside).
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match Msg::decode(&bytes) {
                Ok(Msg::Refused { .. }) | Err(_) => {}
                Ok(m) => prop_assert_eq!(m.encode(), bytes),
            }
        }

        #[test]
        fn another_version_is_refused(m in msg(), v in any::<u8>()) {
            prop_assume!(v != VERSION);
            let mut bytes = m.encode();
            bytes[0] = v;
            prop_assert_eq!(Msg::decode(&bytes), Err(WireError::Version { theirs: v }));
            prop_assert_eq!(Msg::id_of(&bytes), 0);
        }
    }

    #[test]
    fn the_old_format_is_another_version() {
        // The format without a version byte: 'S', the id, the payload.
        let mut old = vec![b'S'];
        old.extend_from_slice(&7u64.to_le_bytes());
        old.extend_from_slice(b"{}");
        let e = Msg::decode(&old).unwrap_err();
        assert_eq!(e, WireError::Version { theirs: b'S' });
        assert_eq!(
            e.to_string(),
            format!("a message of protocol version 83, while this nxcc speaks version {VERSION}")
        );
    }

    #[test]
    fn fixed_messages_with_bytes_after_their_end_are_refused() {
        let mut b = Msg::Started { id: 1, pid: 2 }.encode();
        b.push(0);
        assert_eq!(Msg::decode(&b), Err(WireError::Trailing(1)));
        let mut b = Msg::Spawn {
            id: 1,
            payload: Payload::Memfd { len: 9 },
        }
        .encode();
        b.extend_from_slice(b"xy");
        assert_eq!(Msg::decode(&b), Err(WireError::Trailing(2)));
        assert_eq!(
            Msg::decode(&[VERSION, b'Q', 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(WireError::Kind(b'Q'))
        );
        assert_eq!(Msg::decode(&[]), Err(WireError::Truncated(0)));
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let why = "é".repeat(WHY_MAX);
        let b = Msg::Refused { id: 3, why }.encode();
        let Ok(Msg::Refused { id: 3, why }) = Msg::decode(&b) else {
            panic!("not read back")
        };
        assert_eq!(why.len(), WHY_MAX);
        assert!(why.chars().all(|c| c == 'é'));
    }
}
