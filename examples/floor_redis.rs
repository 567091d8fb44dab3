//! The floor of a request that needs one Redis round trip (a job submit or poll): the canned
//! server of `floor.rs`, making one `GET` to `FLOOR_REDIS` (default redis://127.0.0.1:6379)
//! before each answer, through the client and connection kind the job store uses. Against it
//! only our own work around the round trip is left; `docs/performance.md` ("Job path") uses it to
//! show what two shared cores allow. Kept apart from `floor.rs` so the floor's size and cold
//! start stay those of a server with nothing linked in.

#[path = "support/floors.rs"]
mod floors;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let url = std::env::var("FLOOR_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url).map_err(std::io::Error::other)?;
    let redis = redis::aio::ConnectionManager::new(client).await.map_err(std::io::Error::other)?;
    floors::serve("floor (one Redis GET a request)", move |_body| {
        let mut redis = redis.clone();
        async move {
            // A lost connection answers 500, which stops the harness, instead of answering at
            // full speed without the round trip it is there to measure.
            match redis::cmd("GET").arg("floor:key").query_async::<Option<Vec<u8>>>(&mut redis).await {
                Ok(_) => (http::StatusCode::OK, bytes::Bytes::from_static(floors::ECHO)),
                Err(_) => (http::StatusCode::INTERNAL_SERVER_ERROR, bytes::Bytes::from_static(b"redis")),
            }
        }
    })
    .await
}
