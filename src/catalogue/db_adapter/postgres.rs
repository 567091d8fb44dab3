//! The products backend over PostgreSQL (`DATABASE_URL`).
//!
//! Three layers keep it read-only, so no one of them is trusted alone: the role in the URL is
//! granted `SELECT` on four columns of `products` and nothing else (see `db/db-adapter.sql`;
//! the secret column is not readable at all); every session starts with
//! `default_transaction_read_only=on`; and the adapter only ever sends fixed statements whose
//! filters are bound parameters, never text spliced into SQL.
//!
//! The connection is opened on first use, not at start-up, and reopened when it drops. TLS is
//! rustls with the webpki roots and always verifies the certificate; when the URL has no
//! `sslmode`, loopback hosts connect in plain text and every other host requires TLS.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{Client, Row};

use super::{DbError, DbFuture, ProductBackend, ProductRow, Write};

/// How long one statement may take, and how long a call may wait for a connection (its own
/// attempt, or another call's that it waits behind): a read ends within twice this, and so does
/// a write (a connection of its own, then its transaction). The server's `statement_timeout` is
/// the same; the client's own bounds what the server cannot, a link that stops answering.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

const BY_CATEGORY: &str = "SELECT id::bigint AS id, name, category, price_cents::bigint AS price_cents FROM products WHERE category = $1 ORDER BY id LIMIT $2";
const BY_ID: &str =
    "SELECT id::bigint AS id, name, category, price_cents::bigint AS price_cents FROM products WHERE id = $1::bigint";
const CATEGORIES: &str = "SELECT DISTINCT category COLLATE \"C\" AS category FROM products ORDER BY 1 LIMIT $1";

/// The products table in PostgreSQL, read through a read-only role.
pub struct PostgresProducts {
    config: tokio_postgres::Config,
    client: std::sync::Mutex<Connection>,
}

/// The shared connection: none yet (or the last attempt failed), open, or being opened.
enum Connection {
    None,
    Open(Arc<Client>),
    /// An attempt running on its own task, with its full timeout, whatever its waiters do:
    /// every call waits for the one attempt, each for at most its own time.
    Opening(tokio::sync::watch::Receiver<Option<Result<Arc<Client>, DbError>>>),
}

impl std::fmt::Debug for PostgresProducts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the password.
        f.write_str("PostgresProducts")
    }
}

impl PostgresProducts {
    /// Parses `url` (nothing is connected yet). The error never repeats the URL, which may
    /// carry a password.
    pub fn new(url: &str) -> Result<Self, String> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|_| "DATABASE_URL is not a valid PostgreSQL connection URL".to_owned())?;
        if !url.contains("sslmode=") {
            let loopback = config.get_hosts().iter().all(|host| match host {
                Host::Tcp(name) => {
                    name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
                }
                #[cfg(unix)]
                Host::Unix(_) => true,
            });
            config.ssl_mode(if loopback { SslMode::Disable } else { SslMode::Require });
        }
        config
            .connect_timeout(STATEMENT_TIMEOUT)
            .options(format!(
                "-c default_transaction_read_only=on -c statement_timeout={}",
                STATEMENT_TIMEOUT.as_millis()
            ))
            .application_name("vercel-mcp db-adapter");
        Ok(Self { config, client: std::sync::Mutex::new(Connection::None) })
    }

    async fn client(&self) -> Result<Arc<Client>, DbError> {
        let mut attempt = {
            let mut slot = self.client.lock().expect("connection slot");
            if let Connection::Opening(attempt) = &*slot {
                let finished = attempt.borrow().clone();
                match finished {
                    None => {}
                    Some(Ok(client)) => *slot = Connection::Open(client),
                    Some(Err(_)) => *slot = Connection::None,
                }
            }
            match &*slot {
                Connection::Open(client) if !client.is_closed() => return Ok(client.clone()),
                Connection::Opening(attempt) => attempt.clone(),
                Connection::None | Connection::Open(_) => {
                    let (opened, attempt) = tokio::sync::watch::channel(None);
                    let config = self.config.clone();
                    tokio::spawn(async move {
                        let _ = opened.send(Some(connect(&config).await.map(Arc::new)));
                    });
                    *slot = Connection::Opening(attempt.clone());
                    attempt
                }
            }
        };
        // The attempt's task ended without a word only if it panicked.
        let lost = || DbError::Unavailable("product database unavailable".into());
        let finished = attempt.wait_for(Option::is_some).await.map_err(|_| lost())?.clone();
        finished.unwrap_or_else(|| Err(lost()))
    }

    /// Runs one of the fixed statements; with tracing on it is a CLIENT span named after
    /// `operation` (the statement's values never reach a span).
    async fn query(
        &self,
        operation: &'static str,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, DbError> {
        crate::telemetry::database_span("postgresql", operation, async {
            // A call waits for the shared connection at most a timeout from its start; the
            // attempt it waits for runs on its own, with its full timeout, for every caller.
            // (Queued behind each other's attempts, callers against a server that accepts and
            // never answers waited one timeout each in turn; an attempt cut short by its
            // caller's deadline left the next caller less time, until none could connect.)
            let client =
                tokio::time::timeout(STATEMENT_TIMEOUT, self.client()).await.map_err(|_| connect_timed_out())??;
            match tokio::time::timeout(STATEMENT_TIMEOUT, client.query(statement, params)).await {
                Ok(answered) => answered.map_err(|e| unavailable(&e)),
                Err(_) => {
                    self.forget(&client);
                    Err(statement_timed_out())
                }
            }
        })
        .await
    }

    /// Drops the shared connection if it is still `client`: a statement that got no answer in
    /// time (the server cancels a slow one itself, with an error) means the link stopped
    /// answering, and a socket the peer went silent on can stay open for many minutes, each call
    /// on it waiting a whole timeout. The next call connects afresh.
    fn forget(&self, client: &Arc<Client>) {
        let mut slot = self.client.lock().expect("connection slot");
        let holds = match &*slot {
            Connection::Open(open) => Arc::ptr_eq(open, client),
            // An attempt that finished is read into the slot only by the next call.
            Connection::Opening(attempt) => {
                matches!(&*attempt.borrow(), Some(Ok(opened)) if Arc::ptr_eq(opened, client))
            }
            Connection::None => false,
        };
        if holds {
            *slot = Connection::None;
        }
    }

    async fn write(&self, write: Write) -> Result<(), DbError> {
        let statement = match write {
            Write::Insert => {
                "INSERT INTO products (id, name, category, price_cents, secret_cost_cents) VALUES (999, 'x', 'x', 1, 1)"
            }
            Write::Update => "UPDATE products SET price_cents = 0",
            Write::Delete => "DELETE FROM products",
            Write::DropTable => "DROP TABLE products",
        };
        // A connection of its own, so the transaction cannot interleave with shared queries;
        // rolled back whatever happens, so even a wrongly privileged role changes nothing.
        let mut client = connect(&self.config).await?;
        let attempt = async {
            let transaction = client.transaction().await?;
            let outcome = transaction.batch_execute(statement).await;
            let _ = transaction.rollback().await;
            outcome
        };
        // Dropped at the deadline, the client closes its connection: nothing is left open.
        let outcome = tokio::time::timeout(STATEMENT_TIMEOUT, attempt).await.map_err(|_| statement_timed_out())?;
        match outcome {
            Err(e) if is_refusal(&e) => Err(DbError::ReadOnlyViolation(format!("{write:?} refused by the database"))),
            Err(e) => Err(unavailable(&e)),
            Ok(()) => Ok(()),
        }
    }
}

fn statement_timed_out() -> DbError {
    DbError::Unavailable("product database unavailable (statement timed out)".into())
}

fn connect_timed_out() -> DbError {
    DbError::Unavailable("product database unavailable (connect timed out)".into())
}

/// Opens a connection with `config` (at most [`STATEMENT_TIMEOUT`]), its driver on a task of its own.
async fn connect(config: &tokio_postgres::Config) -> Result<Client, DbError> {
    let (client, connection) = tokio::time::timeout(STATEMENT_TIMEOUT, config.connect(RustlsConnect::new()))
        .await
        .map_err(|_| connect_timed_out())?
        .map_err(|e| unavailable(&e))?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; the next call reconnects.
        let _ = connection.await;
    });
    Ok(client)
}

/// Permission denied, read-only transaction, or not the owner: the credential said no.
fn is_refusal(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    error
        .code()
        .is_some_and(|code| *code == SqlState::INSUFFICIENT_PRIVILEGE || *code == SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// A caller-safe error: the SQLSTATE, never the server's text (it can name roles and tables).
fn unavailable(error: &tokio_postgres::Error) -> DbError {
    DbError::Unavailable(match error.code() {
        Some(code) => format!("product database error (SQLSTATE {})", code.code()),
        None => "product database unavailable".into(),
    })
}

fn product(row: &Row) -> Result<ProductRow, DbError> {
    // Fixed text: the driver's would name the table's columns and types to the caller.
    let column = |_: tokio_postgres::Error| DbError::Unavailable("unexpected products schema".into());
    Ok(ProductRow {
        id: row.try_get("id").map_err(column)?,
        name: row.try_get("name").map_err(column)?,
        category: row.try_get("category").map_err(column)?,
        price_cents: row.try_get("price_cents").map_err(column)?,
        secret_cost_cents: None,
    })
}

impl ProductBackend for PostgresProducts {
    fn select_by_category<'a>(&'a self, category: &'a str, limit: u32) -> DbFuture<'a, Vec<ProductRow>> {
        Box::pin(async move {
            let rows = self.query("products.by_category", BY_CATEGORY, &[&category, &i64::from(limit)]).await?;
            rows.iter().map(product).collect()
        })
    }

    fn select_by_id(&self, id: i64) -> DbFuture<'_, Option<ProductRow>> {
        Box::pin(async move { self.query("products.by_id", BY_ID, &[&id]).await?.first().map(product).transpose() })
    }

    fn categories(&self, limit: u32) -> DbFuture<'_, Vec<String>> {
        Box::pin(async move {
            let rows = self.query("products.categories", CATEGORIES, &[&i64::from(limit)]).await?;
            rows.iter().map(|row| row.try_get(0).map_err(|e| unavailable(&e))).collect()
        })
    }

    fn attempt_write(&self, write: Write) -> DbFuture<'_, ()> {
        Box::pin(self.write(write))
    }

    fn describe(&self) -> String {
        "PostgreSQL (DATABASE_URL)".into()
    }
}

/// TLS for PostgreSQL connections: rustls, ring, webpki roots, certificates always verified.
#[derive(Clone)]
struct RustlsConnect(Arc<rustls::ClientConfig>);

impl RustlsConnect {
    fn new() -> Self {
        static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
        Self(
            CONFIG
                .get_or_init(|| {
                    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
                    let config =
                        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                            .with_safe_default_protocol_versions()
                            .expect("ring supports the default protocol versions")
                            .with_root_certificates(roots)
                            .with_no_client_auth();
                    Arc::new(config)
                })
                .clone(),
        )
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for RustlsConnect {
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsHandshake;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsHandshake, io::Error> {
        let name = rustls::pki_types::ServerName::try_from(domain.to_owned())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid database host name for TLS"))?;
        Ok(RustlsHandshake { connector: tokio_rustls::TlsConnector::from(self.0.clone()), name })
    }
}

/// One pending TLS handshake.
struct RustlsHandshake {
    connector: tokio_rustls::TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for RustlsHandshake {
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move { self.connector.connect(self.name, stream).await.map(RustlsStream) })
    }
}

/// A TLS-wrapped database connection.
struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_defaults_to_plain_and_remote_hosts_require_tls() {
        let local = PostgresProducts::new("postgres://reader@127.0.0.1:5432/test").unwrap();
        assert!(matches!(local.config.get_ssl_mode(), SslMode::Disable));
        let remote = PostgresProducts::new("postgres://reader:pw@db.example.com/prod").unwrap();
        assert!(matches!(remote.config.get_ssl_mode(), SslMode::Require));
        let explicit = PostgresProducts::new("postgres://reader@127.0.0.1/test?sslmode=require").unwrap();
        assert!(matches!(explicit.config.get_ssl_mode(), SslMode::Require));
    }

    #[test]
    fn a_bad_url_is_refused_without_echoing_it() {
        let error = PostgresProducts::new("postgres://u:hunter2@host:notaport/db").unwrap_err();
        assert!(!error.contains("hunter2"), "{error}");
        assert!(format!("{:?}", PostgresProducts::new("postgres://u:hunter2@h/db").unwrap()).find("hunter2").is_none());
    }
}
