//! async-jobs-server: start long work, poll it, fetch its result, cancel it.
//!
//! `submit_job` returns a signed handle at once and does no work; the queue consumer runs the
//! steps on whichever instance the platform picks, and the other tools read the shared store.
//! Progress is state read through `get_job_status`, not a stream. Identity comes from the
//! verified access token only; any principal-shaped argument is dropped before the handler runs.

use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use super::{READ_SCOPE as READ, WRITE_SCOPE as WRITE};
use crate::jobs::Jobs;
use crate::protocol::types::{CallToolResult, ToolAnnotations};
use crate::server::{McpServer, RequestContext, ToolDef, ToolError};

/// Arguments of `submit_job`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SubmitArgs {
    /// How many steps the job runs (1 to 100).
    #[schemars(range(min = 1, max = 100))]
    pub steps: i64,
}

/// Arguments of the handle-taking tools.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HandleArgs {
    /// The job handle that submit_job returned.
    #[serde(rename = "jobId")]
    #[schemars(length(min = 1, max = 512))]
    pub job_id: String,
}

fn annotations(read_only: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations { read_only_hint: Some(read_only), idempotent_hint: Some(idempotent), ..Default::default() }
}

/// The payload as the text block's JSON (typed, so nothing is built as a `Value` first).
fn reply(outcome: Result<impl serde::Serialize, String>) -> Result<CallToolResult, ToolError> {
    outcome
        .map(|payload| CallToolResult::text(serde_json::to_string(&payload).expect("job payloads serialise")))
        .map_err(ToolError::Execution)
}

const IDENTITY: &str = "The caller is identified by the access token; principal-like arguments are ignored.";

/// Registers `submit_job`, `get_job_status`, `get_job_result` and `cancel_job`.
pub fn register(server: &mut McpServer, jobs: Arc<Jobs>) {
    server
        .with_state(jobs)
        .tool(
            ToolDef::new("submit_job")
                .description(format!("Start a job of the given number of steps and return its handle immediately; no work is done in this call. Poll get_job_status for progress. {IDENTITY}"))
                .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(false), ..Default::default() })
                .scopes(&[READ, WRITE]),
            submit_job,
        )
        .tool(
            ToolDef::new("get_job_status")
                .description(format!("Report a job's state and progress (completed and total steps). {IDENTITY}"))
                .annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() })
                .scopes(&[READ]),
            get_job_status,
        )
        .tool(
            ToolDef::new("get_job_result")
                .description(format!(
                    "Fetch a job's result: null until the job is done, then the same payload on every call. {IDENTITY}"
                ))
                .annotations(annotations(true, true))
                .scopes(&[READ]),
            get_job_result,
        )
        .tool(
            ToolDef::new("cancel_job")
                .description(format!("Cancel a job: it stops at the next step boundary and frees its slot; a finished job stays finished. Safe to repeat. {IDENTITY}"))
                .annotations(annotations(false, true))
                .scopes(&[READ, WRITE]),
            cancel_job,
        );
}

async fn submit_job(ctx: RequestContext, jobs: Arc<Jobs>, args: SubmitArgs) -> Result<CallToolResult, ToolError> {
    let submitted =
        jobs.submit_traced(ctx.principal(), args.steps, ctx.platform_token(), ctx.span().traceparent()).await;
    if let Some(telemetry) = ctx.span().telemetry() {
        let result = if submitted.is_ok() { "accepted" } else { "refused" };
        telemetry.add(crate::telemetry::JOBS_SUBMITTED, vec![("mcp.job.result", result.into())], 1);
    }
    reply(submitted)
}

async fn get_job_status(ctx: RequestContext, jobs: Arc<Jobs>, args: HandleArgs) -> Result<CallToolResult, ToolError> {
    reply(jobs.status(ctx.principal(), &args.job_id).await)
}

async fn get_job_result(ctx: RequestContext, jobs: Arc<Jobs>, args: HandleArgs) -> Result<CallToolResult, ToolError> {
    reply(jobs.result(ctx.principal(), &args.job_id).await)
}

async fn cancel_job(ctx: RequestContext, jobs: Arc<Jobs>, args: HandleArgs) -> Result<CallToolResult, ToolError> {
    reply(jobs.cancel(ctx.principal(), &args.job_id).await)
}
