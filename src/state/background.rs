//! Work a request starts that goes on after its response: a task's round, the publish of a
//! change. On Vercel an instance may be frozen once its invocation ends, and work it was still
//! doing would wait, unfinished, for the next invocation (or for ever). The edge therefore gives
//! each request a keeper ([`keeping`]), and work spawned under it ([`spawn`]) is handed to the
//! keeper, which holds the invocation open until that work ends (`wait_until`, bounded by the
//! function's maximum duration). Off Vercel there is no keeper, and the work just runs on the
//! runtime.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Work handed to a keeper: spawned by it, and waited for before the invocation ends.
pub type Kept = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What runs work past a response and keeps the invocation open until it ends.
pub type Keeper = Arc<dyn Fn(Kept) + Send + Sync>;

tokio::task_local! {
    static KEEPER: Keeper;
}

/// Runs `request` (one request's handling) with `keeper` receiving the work it spawns. A plain
/// function returning tokio's scoping future, not an `async fn`, so the request's future is held
/// once (see `observe::with_request_sink`).
pub fn keeping<F: Future>(keeper: Keeper, request: F) -> impl Future<Output = F::Output> {
    KEEPER.scope(keeper, request)
}

/// Runs `work` past the current request: handed to the request's keeper when the edge set one
/// (and work that `work` spawns in turn is kept the same way), else spawned on the runtime. A
/// keeper starts what it is handed at once (the platform's `wait_until` spawns it): a request may
/// wait for part of what it handed over (a task's create, before the round that follows it).
pub fn spawn(work: impl Future<Output = ()> + Send + 'static) {
    match KEEPER.try_with(Arc::clone) {
        Ok(keeper) => keeper(Box::pin(KEEPER.scope(keeper.clone(), work))),
        Err(_) => {
            tokio::spawn(work);
        }
    }
}

/// A response body read under a keeper: a stream's work runs as its body is read, after
/// [`keeping`] has returned the head, and what it spawns goes to the same keeper.
pub struct KeptBody<B> {
    body: B,
    keeper: Keeper,
}

impl<B> KeptBody<B> {
    /// `body`, each of whose frames is produced under `keeper`.
    pub fn new(body: B, keeper: Keeper) -> Self {
        Self { body, keeper }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for KeptBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        KEEPER.sync_scope(this.keeper.clone(), || Pin::new(&mut this.body).poll_frame(cx))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A keeper that holds what it is given, unrun, for the test to run.
    fn holding() -> (Keeper, Arc<Mutex<Vec<Kept>>>) {
        let held = Arc::new(Mutex::new(Vec::new()));
        let into = held.clone();
        (Arc::new(move |work| into.lock().unwrap().push(work)), held)
    }

    #[tokio::test]
    async fn work_spawned_under_a_keeper_is_kept_with_what_it_spawns_and_otherwise_just_runs() {
        let (keeper, held) = holding();
        let (done, finished) = tokio::sync::oneshot::channel::<&str>();
        keeping(keeper, async move {
            spawn(async move {
                spawn(async move {
                    let _ = done.send("nested");
                });
            });
        })
        .await;
        assert_eq!(held.lock().unwrap().len(), 1, "the request's work went to its keeper");
        let outer = held.lock().unwrap().pop().unwrap();
        outer.await;
        let inner = held.lock().unwrap().pop().expect("what the work spawned went to the keeper too");
        inner.await;
        assert_eq!(finished.await, Ok("nested"));

        let (done, finished) = tokio::sync::oneshot::channel();
        spawn(async move {
            let _ = done.send(());
        });
        assert_eq!(finished.await, Ok(()), "without a keeper, the work runs on the runtime");
        assert!(held.lock().unwrap().is_empty());
    }

    /// A body whose frame is made by work that spawns (a stream's handler publishing a change).
    struct Spawning;

    impl http_body::Body for Spawning {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
            spawn(async {});
            std::task::Poll::Ready(None)
        }
    }

    /// What a stream's body spawns while it is read, after the head has gone, is kept too.
    #[tokio::test]
    async fn work_spawned_while_a_stream_is_read_is_kept() {
        use http_body_util::BodyExt;
        let (keeper, held) = holding();
        let mut body = KeptBody::new(Spawning, keeper);
        assert!(body.frame().await.is_none());
        assert_eq!(held.lock().unwrap().len(), 1, "the stream's work went to the keeper");
    }
}
