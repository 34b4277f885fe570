//! A minimal RESP2 connection for the measured paths: commands are encoded once, before the
//! clock starts, and replies are parsed in place. The harness then costs a `write` and a
//! `read` per round trip, so the figures are the server's, not the client library's.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(String),
    Bulk(Vec<u8>),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    /// An integer, or a bulk string holding one (GET of a counter).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Appends `args` as one RESP command to `out`.
pub fn encode_into(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One command, encoded.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    encode_into(&mut v, args);
    v
}

fn line(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(pos..)?;
    let i = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..i], pos + i + 2))
}

fn int(l: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(l)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad integer {:?}", String::from_utf8_lossy(l)))
}

/// Parses one reply at `buf[pos..]`: `Ok(None)` when it is not complete yet.
pub fn parse(buf: &[u8], pos: usize) -> Result<Option<(Reply, usize)>, String> {
    if pos >= buf.len() {
        return Ok(None);
    }
    let t = buf[pos];
    let Some((l, next)) = line(buf, pos + 1) else {
        return Ok(None);
    };
    let r = match t {
        b'+' => (Reply::Status(String::from_utf8_lossy(l).into_owned()), next),
        b'-' => (Reply::Error(String::from_utf8_lossy(l).into_owned()), next),
        b':' => (Reply::Int(int(l)?), next),
        b'_' => (Reply::Nil, next),
        b'$' => {
            let n = int(l)?;
            if n < 0 {
                (Reply::Nil, next)
            } else {
                let end = next + n as usize;
                if end + 2 > buf.len() {
                    return Ok(None);
                }
                (Reply::Bulk(buf[next..end].to_vec()), end + 2)
            }
        }
        b'*' => {
            let n = int(l)?;
            if n < 0 {
                (Reply::Nil, next)
            } else {
                let mut items = Vec::with_capacity(n as usize);
                let mut p = next;
                for _ in 0..n {
                    match parse(buf, p)? {
                        Some((r, q)) => {
                            items.push(r);
                            p = q;
                        }
                        None => return Ok(None),
                    }
                }
                (Reply::Array(items), p)
            }
        }
        other => return Err(format!("unexpected reply type byte {other:#x}")),
    };
    Ok(Some(r))
}

/// A plain TCP connection speaking RESP2.
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
    pos: usize,
}

impl RawConn {
    pub async fn connect(port: u16) -> io::Result<RawConn> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            pos: 0,
        })
    }

    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    pub async fn read_reply(&mut self) -> io::Result<Reply> {
        loop {
            match parse(&self.buf, self.pos) {
                Ok(Some((r, p))) => {
                    self.pos = p;
                    if self.pos == self.buf.len() {
                        self.buf.clear();
                        self.pos = 0;
                    }
                    return Ok(r);
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
            if self.pos > 0 {
                self.buf.drain(..self.pos);
                self.pos = 0;
            }
            self.buf.reserve(16 * 1024);
            let n = self.stream.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Sends one command and reads its reply.
    pub async fn call(&mut self, bytes: &[u8]) -> io::Result<Reply> {
        self.send(bytes).await?;
        self.read_reply().await
    }

    /// Reads `expected.len()` replies; returns how many differ from `expected`
    /// (the first mismatch is kept in `first_bad`).
    pub async fn expect(
        &mut self,
        expected: &[Reply],
        first_bad: &mut Option<String>,
    ) -> io::Result<u64> {
        let mut bad = 0;
        for e in expected {
            let r = self.read_reply().await?;
            if &r != e {
                bad += 1;
                if first_bad.is_none() {
                    *first_bad = Some(format!("expected {e:?}, got {r:?}"));
                }
            }
        }
        Ok(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_waits_for_more() {
        let b = b"+OK\r\n:12\r\n$-1\r\n*2\r\n$3\r\nabc\r\n:-1\r\n-ERR x\r\n";
        let mut p = 0;
        let mut got = vec![];
        while let Some((r, q)) = parse(b, p).unwrap() {
            got.push(r);
            p = q;
        }
        assert_eq!(
            got,
            vec![
                Reply::Status("OK".into()),
                Reply::Int(12),
                Reply::Nil,
                Reply::Array(vec![Reply::Bulk(b"abc".to_vec()), Reply::Int(-1)]),
                Reply::Error("ERR x".into()),
            ]
        );
        assert_eq!(parse(b"$3\r\nab", 0).unwrap(), None);
        assert_eq!(parse(b"*2\r\n:1\r\n", 0).unwrap(), None);
        assert_eq!(
            encode(&[b"GET", b"k"]),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()
        );
    }
}
