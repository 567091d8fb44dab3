//! The job record and the limits every store enforces.

use serde::{Deserialize, Serialize};

/// Active (pending or running) jobs a verified principal may hold.
pub const MAX_ACTIVE_JOBS_PER_PRINCIPAL: u32 = 8;
/// Active jobs the anonymous principal may hold.
pub const MAX_ACTIVE_JOBS_ANONYMOUS: u32 = 2;
/// Jobs (active or retained) the whole deployment may hold.
pub const MAX_JOBS_TOTAL: u32 = 256;
/// Largest `steps` a job may have.
pub const MAX_STEPS: u32 = 100;
/// How long a finished or cancelled job stays retrievable.
pub const JOB_RETENTION_MS: u64 = 5 * 60 * 1000;
/// How long an active job may take: past it, the job reads as `failed` (whether or not the
/// sweep has run since) and its slot is free.
pub const JOB_DEADLINE_MS: u64 = 30 * 60 * 1000;
/// The Vercel Queues topic jobs are published to.
pub const JOBS_TOPIC: &str = "jobs";
/// Version of the stored record format; readers accept this and older versions.
pub const RECORD_VERSION: u32 = 1;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Created, no step run yet.
    Pending,
    /// At least one step run.
    Running,
    /// Every step run; the result is frozen.
    Done,
    /// Cancelled before finishing.
    Cancelled,
    /// Stuck past its deadline (decided on every read and write, not only by the sweep).
    Failed,
}

impl JobState {
    /// Pending or running: holds a slot under the principal's cap.
    pub fn is_active(self) -> bool {
        matches!(self, Self::Pending | Self::Running)
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Done => "done",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
        }
    }
}

/// The frozen outcome of a finished job: the sum 0 + 1 + … + (N − 1) and the steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobResult {
    /// How many steps ran.
    pub steps_run: u32,
    /// The sum 0 + 1 + … + (steps − 1).
    pub sum: u64,
}

impl JobResult {
    /// The result of a job that ran all of its `steps`.
    pub fn for_steps(steps: u32) -> Self {
        let n = u64::from(steps);
        Self { sum: n * n.saturating_sub(1) / 2, steps_run: steps }
    }
}

/// One job as stored. `owner_id` is stored for ownership checks and never returned to clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    /// Record format version.
    pub v: u32,
    /// The raw job id (22 base64url characters); clients only ever see it inside a signed handle.
    pub job_id: String,
    /// The owning principal's id.
    pub owner_id: String,
    /// Life-cycle state.
    pub state: JobState,
    /// Steps to run.
    pub total_steps: u32,
    /// Steps run so far.
    pub completed_steps: u32,
    /// Set once done.
    pub result: Option<JobResult>,
    /// Set by `cancel_job`; the worker stops at the next step boundary.
    pub cancel_requested: bool,
    /// Creation time (ms since the epoch).
    pub created_at: u64,
    /// Last change (ms since the epoch).
    pub updated_at: u64,
    /// When the job became done, cancelled or failed.
    pub finished_at: Option<u64>,
    /// When an active job counts as stuck.
    pub deadline: u64,
}

impl JobRecord {
    /// A new pending job.
    pub fn new(job_id: String, owner_id: String, steps: u32, now: u64) -> Self {
        Self {
            v: RECORD_VERSION,
            job_id,
            owner_id,
            state: JobState::Pending,
            total_steps: steps,
            completed_steps: 0,
            result: None,
            cancel_requested: false,
            created_at: now,
            updated_at: now,
            finished_at: None,
            deadline: now + JOB_DEADLINE_MS,
        }
    }

    /// When a finished job is evicted.
    pub fn evict_at(&self) -> Option<u64> {
        self.finished_at.map(|f| f + JOB_RETENTION_MS)
    }

    /// Applies one step if `expected` steps have run (a redelivered message finds the count
    /// moved on and changes nothing). Honours a cancel request first.
    pub fn advance(&mut self, expected: u32, now: u64) -> bool {
        if !self.state.is_active() || self.completed_steps != expected {
            return false;
        }
        if self.cancel_requested {
            self.cancel(now);
            return true;
        }
        self.completed_steps += 1;
        self.state = JobState::Running;
        self.updated_at = now;
        if self.completed_steps >= self.total_steps {
            self.state = JobState::Done;
            self.result = Some(JobResult::for_steps(self.completed_steps));
            self.finished_at = Some(now);
        }
        true
    }

    /// Cancels an active job (a finished one is left as it is). Returns whether it changed.
    pub fn cancel(&mut self, now: u64) -> bool {
        if !self.state.is_active() {
            return false;
        }
        self.state = JobState::Cancelled;
        self.cancel_requested = true;
        self.finished_at = Some(now);
        self.updated_at = now;
        true
    }

    /// Fails an active job now: its message can never be delivered again (dead-lettered), so
    /// nothing would run it. Returns whether it changed.
    pub fn abandon(&mut self, now: u64) -> bool {
        if !self.state.is_active() {
            return false;
        }
        self.state = JobState::Failed;
        self.finished_at = Some(now);
        self.updated_at = now;
        true
    }

    /// Marks an active job past its deadline as failed. Returns whether it changed.
    ///
    /// It failed *at* its deadline, whenever this is noticed: its retention runs from the
    /// deadline, so how often the sweep runs (every ten minutes, or once a day on Hobby) changes
    /// nothing a client can see.
    pub fn fail_if_stuck(&mut self, now: u64) -> bool {
        if !self.state.is_active() || now < self.deadline {
            return false;
        }
        self.state = JobState::Failed;
        self.finished_at = Some(self.deadline);
        self.updated_at = now;
        true
    }

    /// When the record may be forgotten: retention after it finished, or after its deadline
    /// while it is active (by then it reads as failed and has been retained for as long).
    pub fn forget_at(&self) -> u64 {
        self.finished_at.unwrap_or(self.deadline) + JOB_RETENTION_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_and_transitions() {
        assert_eq!(JobResult::for_steps(7), JobResult { sum: 21, steps_run: 7 });
        assert_eq!(JobResult::for_steps(1), JobResult { sum: 0, steps_run: 1 });
        let mut job = JobRecord::new("j".into(), "o".into(), 2, 10);
        assert!(!job.advance(1, 11), "a step out of order is refused");
        assert!(job.advance(0, 11));
        assert_eq!(job.state, JobState::Running);
        assert!(!job.advance(0, 12), "the same step twice is not applied twice");
        assert!(job.advance(1, 12));
        assert_eq!(
            (job.state, job.result, job.finished_at),
            (JobState::Done, Some(JobResult { sum: 1, steps_run: 2 }), Some(12))
        );
        assert!(!job.cancel(13), "a done job stays done");
        assert_eq!(job.finished_at, Some(12));
    }

    #[test]
    fn a_stuck_job_failed_at_its_deadline_whenever_it_is_noticed() {
        let mut early = JobRecord::new("j".into(), "o".into(), 2, 0);
        assert!(!early.fail_if_stuck(JOB_DEADLINE_MS - 1), "not before the deadline");
        assert_eq!(early.forget_at(), JOB_DEADLINE_MS + JOB_RETENTION_MS, "active: kept until the failure expires");
        let mut late = early.clone();
        assert!(early.fail_if_stuck(JOB_DEADLINE_MS));
        assert!(late.fail_if_stuck(JOB_DEADLINE_MS + 4 * 60 * 1000), "noticed four minutes late");
        for job in [&early, &late] {
            assert_eq!((job.state, job.finished_at), (JobState::Failed, Some(JOB_DEADLINE_MS)));
            assert_eq!(job.evict_at(), Some(JOB_DEADLINE_MS + JOB_RETENTION_MS), "retention runs from the deadline");
        }
        assert!(!late.fail_if_stuck(JOB_DEADLINE_MS * 2), "failed once");
        assert!(!late.advance(0, JOB_DEADLINE_MS * 2) && !late.cancel(JOB_DEADLINE_MS * 2), "and stays failed");
    }
}
