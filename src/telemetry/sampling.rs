//! Which spans are exported: the operator's sampler, applied where a request's work enters this
//! process, with the caller's decision able to turn it off but never on.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

use super::SamplerChoice;

/// The sampling gate. A span whose parent is one of this process's own follows it. A span that
/// starts work here (a request's, under the caller's context or none; a job delivery's, under the
/// submitter's) is sampled only when the operator's choice samples it *and*, if a caller sent a
/// decision, that decision was to sample: the caller's flag can only veto (an AND gate: the
/// caller's decision and the operator's must both allow it). Before, `parentbased_*` followed a caller's `-01` whatever the ratio, and any caller
/// could have every request it sent exported.
///
/// The ratio is judged on a keyed hash of the trace id, not on the id itself: a caller chooses its
/// trace id, and could otherwise choose one that every ratio samples (the OpenTelemetry ratio
/// sampler reads the id's low bits). The key is derived from the deployment's state secret, so
/// every instance decides alike for one trace (a job delivered elsewhere stays in its trace).
#[derive(Clone)]
pub(crate) struct Gate {
    rule: Rule,
    key: ring::hmac::Key,
}

#[derive(Clone, Copy, Debug)]
enum Rule {
    Always,
    Never,
    Ratio(f64),
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("rule", &self.rule).finish_non_exhaustive()
    }
}

impl Gate {
    /// The gate for `choice`, hashing trace ids under `key`. The `parentbased_` choices and their
    /// plain forms are the same gate: at the boundary the operator's rule applies, and within the
    /// process every span follows its parent.
    pub(crate) fn new(choice: SamplerChoice, key: &[u8; 32]) -> Self {
        let rule = match choice {
            SamplerChoice::AlwaysOn | SamplerChoice::ParentBasedAlwaysOn => Rule::Always,
            SamplerChoice::AlwaysOff | SamplerChoice::ParentBasedAlwaysOff => Rule::Never,
            SamplerChoice::Ratio(ratio) | SamplerChoice::ParentBasedRatio(ratio) => Rule::Ratio(ratio),
        };
        Self { rule, key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key) }
    }

    /// Whether the operator's rule samples the trace `trace_id`.
    fn admits(&self, trace_id: TraceId) -> bool {
        match self.rule {
            Rule::Always => true,
            Rule::Never => false,
            Rule::Ratio(ratio) if ratio >= 1.0 => true,
            Rule::Ratio(ratio) => {
                let tag = ring::hmac::sign(&self.key, &trace_id.to_bytes());
                let draw = u64::from_be_bytes(tag.as_ref()[..8].try_into().expect("8 bytes")) >> 11;
                (draw as f64) < ratio.max(0.0) * (1u64 << 53) as f64
            }
        }
    }
}

impl ShouldSample for Gate {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let parent = parent_context.map(|cx| cx.span().span_context().clone()).filter(|p| p.is_valid());
        let sampled = match &parent {
            Some(parent) if !parent.is_remote() => parent.is_sampled(),
            Some(parent) => parent.is_sampled() && self.admits(trace_id),
            None => self.admits(trace_id),
        };
        SamplingResult {
            decision: if sampled { SamplingDecision::RecordAndSample } else { SamplingDecision::Drop },
            attributes: Vec::new(),
            trace_state: parent.map_or_else(TraceState::default, |parent| parent.trace_state().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags};

    fn decide(gate: &Gate, parent: Option<SpanContext>, trace_id: TraceId) -> bool {
        let cx = parent.map(|parent| Context::new().with_remote_span_context(parent));
        let result = gate.should_sample(cx.as_ref(), trace_id, "s", &SpanKind::Server, &[], &[]);
        result.decision == SamplingDecision::RecordAndSample
    }

    fn remote(trace_id: TraceId, sampled: bool) -> SpanContext {
        let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        SpanContext::new(trace_id, SpanId::from_bytes([1; 8]), flags, true, TraceState::default())
    }

    /// A caller's sampled flag cannot bring a trace past the operator's ratio, whatever trace id
    /// it chooses (ids whose low bits the ratio sampler of OpenTelemetry always takes included);
    /// its unsampled flag keeps out a trace the ratio would take; without a caller, the ratio
    /// alone decides, about as often as it says.
    #[test]
    fn a_caller_can_veto_sampling_but_never_force_it() {
        let key = [7u8; 32];
        let rare = Gate::new(SamplerChoice::ParentBasedRatio(0.0001), &key);
        let chosen = (0..64u128).map(|n| TraceId::from(n << 64)); // low 64 bits all zero
        let forced = chosen.clone().filter(|id| decide(&rare, Some(remote(*id, true)), *id)).count();
        assert_eq!(forced, 0, "no chosen id is sampled at a ratio of 1 in 10 000");
        let plain = Gate::new(SamplerChoice::Ratio(0.0001), &key);
        assert_eq!(chosen.filter(|id| decide(&plain, None, *id)).count(), 0);

        let always = Gate::new(SamplerChoice::ParentBasedAlwaysOn, &key);
        let id = TraceId::from(42u128);
        assert!(decide(&always, None, id) && decide(&always, Some(remote(id, true)), id));
        assert!(!decide(&always, Some(remote(id, false)), id), "the caller may turn it off");
        let never = Gate::new(SamplerChoice::ParentBasedAlwaysOff, &key);
        assert!(!decide(&never, Some(remote(id, true)), id), "the operator's rule applies at the boundary");

        let half = Gate::new(SamplerChoice::Ratio(0.5), &key);
        let taken = (1..=2000u128).filter(|n| decide(&half, None, TraceId::from(n * 0x9e37_79b9_7f4a_7c15))).count();
        assert!((850..=1150).contains(&taken), "{taken} of 2000 at one half");
        let other = Gate::new(SamplerChoice::Ratio(0.5), &[8u8; 32]);
        let differ = (1..=64u128).any(|n| {
            let id = TraceId::from(n * 0x9e37_79b9_7f4a_7c15);
            decide(&half, None, id) != decide(&other, None, id)
        });
        assert!(differ, "the key decides, not the trace id alone");
    }
}
