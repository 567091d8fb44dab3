//! The one connection to the deployment's Redis, shared by every store of a process.

use redis::aio::ConnectionManager;
use std::sync::Arc;
use std::time::Duration;

use super::{STORE_FULL_CODE, StoreError};

/// A lazily opened, self-healing connection and the key prefix every store writes under.
/// Cloning shares the connection.
#[derive(Clone)]
pub struct Redis {
    /// Boxed: with its TLS settings a client is large, and every store holds a `Redis`.
    client: Arc<redis::Client>,
    connection: ConnectionManager,
    prefix: String,
    /// Shared by every clone: which handles reach the same server through the same connection.
    identity: Arc<()>,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the URL: it carries the password.
        f.debug_struct("Redis").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl Redis {
    /// A connection to `url` (`redis://` or `rediss://`). Nothing is sent until first use, and
    /// connecting and each response are bounded, so an outage becomes an error, not a hang.
    /// `rediss://` verifies the server's certificate against the public roots (as every managed
    /// Redis presents).
    pub fn connect(url: &str, prefix: &str) -> Result<Self, String> {
        Self::connect_trusting(url, prefix, None)
    }

    /// [`Redis::connect`], trusting only the certificates of `ca_pem` (`MCP_REDIS_CA_PEM`: a
    /// Redis whose certificate a private authority signed) instead of the public roots. Only
    /// for `rediss://`; a certificate is never skipped, whatever the URL says.
    pub fn connect_trusting(url: &str, prefix: &str, ca_pem: Option<&str>) -> Result<Self, String> {
        let client = match ca_pem {
            None => {
                redis::Client::open(url).map_err(|_| "REDIS_URL is not a valid redis:// or rediss:// URL".to_owned())?
            }
            Some(_) if !url.starts_with("rediss://") => {
                return Err("MCP_REDIS_CA_PEM is set, so REDIS_URL must be a rediss:// (TLS) URL".to_owned());
            }
            Some(pem) if !pem.contains("-----BEGIN CERTIFICATE-----") => {
                return Err("MCP_REDIS_CA_PEM holds no PEM certificate".to_owned());
            }
            Some(pem) => {
                let trusted = redis::TlsCertificates { client_tls: None, root_cert: Some(pem.as_bytes().to_vec()) };
                redis::Client::build_with_tls(url, trusted).map_err(|error| match error.kind() {
                    redis::ErrorKind::InvalidClientConfig => "REDIS_URL is not a valid rediss:// URL".to_owned(),
                    _ => "MCP_REDIS_CA_PEM is not a readable PEM certificate".to_owned(),
                })?
            }
        };
        // `rediss://…#insecure` asks the client to skip the certificate check. That mode is not
        // built in, and such a URL would only fail at every call; it is refused here instead.
        if matches!(client.get_connection_info().addr(), redis::ConnectionAddr::TcpTls { insecure: true, .. }) {
            return Err("REDIS_URL asks to skip the server's certificate check (#insecure), which is never done; \
                 remove it, and set MCP_REDIS_CA_PEM if a private authority signed the certificate"
                .to_owned());
        }
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| format!("redis client: {}", kind_label(&e)))?;
        Ok(Self { client: Arc::new(client), connection, prefix: prefix.to_owned(), identity: Arc::new(()) })
    }

    /// The key prefix (`MCP_REDIS_PREFIX`; by default `mcp`, or `mcp:<environment>` deployed to
    /// an environment other than production).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A handle on the shared connection, for one command or script.
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Whether `other` is a clone of this handle: the same connection, so one script may touch
    /// keys of both (a job record and the queue's stream, say).
    pub fn is_same_connection(&self, other: &Redis) -> bool {
        Arc::ptr_eq(&self.identity, &other.identity)
    }

    /// The client, for what needs a connection of its own (a pub/sub subscription).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// A connection of its own, for blocking commands (`XREADGROUP … BLOCK`) that would hold up
    /// every other command on the shared one; each response may take up to `response_timeout`.
    pub fn dedicated(&self, response_timeout: Duration) -> Result<ConnectionManager, String> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        ConnectionManager::new_lazy_with_config(redis::Client::clone(&self.client), config)
            .map_err(|e| format!("redis client: {}", kind_label(&e)))
    }
}

/// A Redis error as an outage of `what` (`job store`, say). The server's message never goes out
/// (it may carry key names); the error's kind does.
pub fn fault_from(error: &redis::RedisError, what: &str) -> StoreError {
    StoreError::fault(format!("{what} unavailable: {}", kind_label(error)))
}

/// The error of a capped store's script: the cap's own error code ([`STORE_FULL_CODE`]) becomes
/// `full(cap)`, where `cap` is the word after the code (which cap, when a script has several:
/// `STORE_FULL callers`), anything else an outage as in [`fault_from`].
pub fn capped_fault_from(error: &redis::RedisError, what: &str, full: impl FnOnce(&str) -> StoreError) -> StoreError {
    if error.code() == Some(STORE_FULL_CODE) { full(error.detail().unwrap_or("")) } else { fault_from(error, what) }
}

fn kind_label(error: &redis::RedisError) -> String {
    if error.is_timeout() {
        "timed out".into()
    } else if error.is_connection_refusal() || error.is_io_error() || error.is_connection_dropped() {
        "connection failed".into()
    } else {
        format!("{:?}", error.kind())
    }
}
