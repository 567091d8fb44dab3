//! HTTP/1.1 on loopback for the benchmark and soak programs: free ports, one keep-alive
//! request/response exchange, resident memory from `/proc`, percentiles.

#![allow(dead_code)]

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// Reads one response with a Content-Length body into `buffer`; returns its status and body.
pub fn read_response<'b>(stream: &mut TcpStream, buffer: &'b mut Vec<u8>) -> (u16, &'b [u8]) {
    buffer.clear();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("measured responses carry Content-Length");
            while buffer.len() < end + 4 + length {
                let n = stream.read(&mut chunk).unwrap();
                assert!(n > 0, "connection closed");
                buffer.extend_from_slice(&chunk[..n]);
            }
            let status = head[9..12].parse().unwrap();
            return (status, &buffer[end + 4..end + 4 + length]);
        }
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The `p` quantile of sorted latencies.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
