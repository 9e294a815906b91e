//! Just enough HTTP/1.1 for the dataplane's small endpoints: read one
//! request (head and a `Content-Length` body, both bounded), write one
//! response, close. Prometheus scrapers, curl and the operator's Go client
//! all speak this subset; a web framework would only add weight.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Method, e.g. `GET`.
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read; each maps to a response status.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The peer closed before sending a whole request.
    Closed,
    /// Malformed request line or header (400).
    BadRequest(&'static str),
    /// Head larger than allowed (431).
    HeadTooLarge,
    /// Body larger than allowed (413).
    BodyTooLarge,
    /// An I/O error.
    Io(std::io::ErrorKind),
}

impl ReadError {
    /// The status line to answer with, if any answer makes sense.
    pub fn status(&self) -> Option<&'static str> {
        match self {
            Self::BadRequest(_) => Some("400 Bad Request"),
            Self::HeadTooLarge => Some("431 Request Header Fields Too Large"),
            Self::BodyTooLarge => Some("413 Content Too Large"),
            Self::Closed | Self::Io(_) => None,
        }
    }
}

/// Reads one request: the head up to `max_head` bytes, then a body of at
/// most `max_body` bytes.
pub async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
    max_head: usize,
    max_body: usize,
) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > max_head {
            return Err(ReadError::HeadTooLarge);
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| ReadError::Io(e.kind()))?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > max_head {
        return Err(ReadError::HeadTooLarge);
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| ReadError::BadRequest("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::BadRequest("malformed request line"));
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() || method.is_empty() {
        return Err(ReadError::BadRequest("malformed request line"));
    }
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line
            .split_once(':')
            .ok_or(ReadError::BadRequest("malformed header"))?;
        if k.is_empty() || k.contains(' ') {
            return Err(ReadError::BadRequest("malformed header name"));
        }
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut req = Request {
        method: method.to_owned(),
        path: target.split('?').next().unwrap_or_default().to_owned(),
        headers,
        body: Vec::new(),
    };
    if req.header("transfer-encoding").is_some() {
        return Err(ReadError::BadRequest(
            "chunked bodies are not supported; send Content-Length",
        ));
    }
    let len = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| ReadError::BadRequest("bad Content-Length"))?,
    };
    if len > max_body {
        return Err(ReadError::BodyTooLarge);
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| ReadError::Io(e.kind()))?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}

/// Writes a complete response and shuts the stream down.
pub async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    content_type: &str,
    extra_headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra_headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(raw: &[u8]) -> Result<Request, ReadError> {
        let mut s = raw;
        read_request(&mut s, 1024, 64).await
    }

    #[tokio::test]
    async fn requests() {
        let r = parse(b"POST /rpc?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer t\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/rpc"));
        assert_eq!(r.header("authorization"), Some("Bearer t"));
        assert_eq!(r.body, b"hello");
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n").await.unwrap().body, b"");
    }

    #[tokio::test]
    async fn refusals() {
        assert_eq!(
            parse(b"GET /\r\n\r\n").await,
            Err(ReadError::BadRequest("malformed request line"))
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nbad\r\n\r\n").await,
            Err(ReadError::BadRequest("malformed header"))
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n").await,
            Err(ReadError::BodyTooLarge)
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab").await,
            Err(ReadError::Closed)
        );
        assert!(matches!(
            parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").await,
            Err(ReadError::BadRequest(_))
        ));
        let big = [
            b"GET / HTTP/1.1\r\nX: ".as_slice(),
            &[b'a'; 2000],
            b"\r\n\r\n",
        ]
        .concat();
        assert_eq!(parse(&big).await, Err(ReadError::HeadTooLarge));
    }
}
