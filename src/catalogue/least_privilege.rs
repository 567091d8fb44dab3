//! least-privilege-server: a toy billing integration where every tool declares the scopes it
//! needs and the server holds no more than their union.
//!
//! * The scope table drives registration, listing and authorization: one source of truth.
//! * Start-up refuses a credential grant that is too narrow *or* too broad, and a registered
//!   tool missing from the table (drift guard): see [`validate_config`], run when the examples' settings are read (`catalogue::ExampleSettings`).
//! * `tools/list` shows each verified principal only the tools its token's scopes cover; every
//!   call re-authorizes first, before any lookup or bounds check (default deny: an undeclared
//!   tool requires the whole union).
//! * Outbound calls pass a host allowlist; refunds are bounded by the invoice.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

use crate::protocol::types::ToolAnnotations;
use crate::security::Principal;
use crate::server::{McpServer, RequestContext, ToolDef, ToolError};

/// The scopes each tool needs.
pub const REQUIRED_SCOPES: &[(&str, &[&str])] =
    &[("read_invoice", &["invoices:read"]), ("issue_refund", &["invoices:read", "refunds:write"])];
/// Hosts outbound calls may reach.
pub const OUTBOUND_ALLOWLIST: &[&str] = &["api.payments.example"];
/// Largest refund in cents.
pub const MAX_REFUND_CENTS: i64 = 100_000;
/// The stub upstream's amount for every invoice.
pub const STUB_INVOICE_AMOUNT_CENTS: i64 = 4200;
/// The environment variable naming the credential's granted scopes.
pub const GRANTED_SCOPES_ENV: &str = "LP_GRANTED_SCOPES";

/// The union of every tool's scopes, sorted.
pub fn required_union() -> Vec<String> {
    let mut union: Vec<String> = REQUIRED_SCOPES.iter().flat_map(|(_, s)| s.iter().map(|s| s.to_string())).collect();
    union.sort();
    union.dedup();
    union
}

/// `read_invoice`, as [`register`] names it.
pub const READ_INVOICE: &str = "read_invoice";
/// `issue_refund`, as [`register`] names it.
pub const ISSUE_REFUND: &str = "issue_refund";

/// The tools [`register`] registers, by the names it registers them under: the drift guard
/// ([`validate_config`]) checks each against the scope table.
pub fn registered_tool_names() -> Vec<&'static str> {
    vec![READ_INVOICE, ISSUE_REFUND]
}

/// Splits a comma-separated scope list, trimming and dropping empties.
pub fn parse_scopes(raw: &str) -> Vec<String> {
    raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// Refuses to start unless `granted` equals `required` exactly and every registered tool has a
/// scope entry. Each problem names what is wrong.
pub fn validate_config(granted: &[String], required: &[String], registered: &[&str]) -> Result<(), String> {
    let missing: Vec<&String> = required.iter().filter(|s| !granted.contains(s)).collect();
    if !missing.is_empty() {
        return Err(format!("{GRANTED_SCOPES_ENV}: the grant lacks required scopes {missing:?}"));
    }
    let excess: Vec<&String> = granted.iter().filter(|s| !required.contains(s)).collect();
    if !excess.is_empty() {
        return Err(format!("{GRANTED_SCOPES_ENV}: the grant is broader than needed; drop {excess:?}"));
    }
    if let Some(undeclared) = registered.iter().find(|name| !REQUIRED_SCOPES.iter().any(|(n, _)| n == *name)) {
        return Err(format!("tool {undeclared} is registered without a scope declaration"));
    }
    Ok(())
}

/// Call-time authorization: every scope the tool needs must be granted by the verified token.
/// An undeclared tool needs the whole union (fail closed).
pub fn authorize(principal: &Principal, tool: &str) -> Result<(), String> {
    let required: Vec<String> = match REQUIRED_SCOPES.iter().find(|(name, _)| *name == tool) {
        Some((_, scopes)) => scopes.iter().map(|s| s.to_string()).collect(),
        None => required_union(),
    };
    let missing: Vec<&String> = required.iter().filter(|s| !principal.scopes().contains(s)).collect();
    if missing.is_empty() && principal.is_verified() {
        return Ok(());
    }
    let who = if principal.is_verified() { principal.id() } else { "an unauthenticated caller" };
    // The scopes it lacks, not all it needs: one the caller holds is not the problem. (An
    // unauthenticated caller lacks them all, and may be refused a tool that needs none.)
    let lacking: Vec<&str> = if missing.is_empty() {
        required.iter().map(String::as_str).collect()
    } else {
        missing.iter().map(|scope| scope.as_str()).collect()
    };
    Err(format!("not authorized: {who} may not call {tool}; it lacks {}", lacking.join(" ")))
}

/// Refuses any host not on the allowlist (a boundary check; the stub opens no socket).
pub fn check_outbound(host: &str) -> Result<(), String> {
    if OUTBOUND_ALLOWLIST.contains(&host) { Ok(()) } else { Err(format!("outbound call to {host} denied")) }
}

/// Where issued refunds are recorded.
pub trait RefundLedger: Send + Sync + 'static {
    /// Records one refund.
    fn record(&self, invoice_id: &str, amount_cents: i64);
}

/// The default ledger: the stub upstream keeps nothing.
#[derive(Debug, Default)]
pub struct DiscardLedger;

impl RefundLedger for DiscardLedger {
    fn record(&self, _: &str, _: i64) {}
}

/// Arguments of `read_invoice`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadInvoiceArgs {
    /// The invoice id: "inv-" followed by digits.
    #[serde(rename = "invoiceId")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^inv-[0-9]+$"))]
    pub invoice_id: String,
}

/// Arguments of `issue_refund`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IssueRefundArgs {
    /// The invoice id: "inv-" followed by digits.
    #[serde(rename = "invoiceId")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^inv-[0-9]+$"))]
    pub invoice_id: String,
    /// The refund in cents (1 to 100000, at most the invoice amount).
    #[serde(rename = "amountCents")]
    #[schemars(range(min = 1, max = 100000))]
    pub amount_cents: i64,
}

const IDENTITY: &str = "Identity comes from the access token; principal arguments are ignored.";

/// The scopes `tool` is listed and called with: its entry in the table, or the whole union for a
/// tool without one (fail closed, as [`authorize`] does).
fn scopes_of(tool: &str) -> Vec<String> {
    match REQUIRED_SCOPES.iter().find(|(name, _)| *name == tool) {
        Some((_, scopes)) => scopes.iter().map(|s| s.to_string()).collect(),
        None => required_union(),
    }
}

/// Registers `read_invoice` and `issue_refund`, recording refunds in `ledger`.
pub fn register(server: &mut McpServer, ledger: Arc<dyn RefundLedger>) {
    server.tool(
        ToolDef::new(READ_INVOICE)
            .description(format!("Read an invoice. {IDENTITY}"))
            .annotations(ToolAnnotations {
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                idempotent_hint: Some(true),
                ..Default::default()
            })
            .scopes(&scopes_of(READ_INVOICE).iter().map(String::as_str).collect::<Vec<_>>())
            .scopes_always_enforced(),
        read_invoice,
    );
    server.with_state(ledger).tool(
        ToolDef::new(ISSUE_REFUND)
            .description(format!("Refund part or all of an invoice. {IDENTITY}"))
            .annotations(ToolAnnotations {
                read_only_hint: Some(false),
                destructive_hint: Some(true),
                idempotent_hint: Some(false),
                ..Default::default()
            })
            .scopes(&scopes_of(ISSUE_REFUND).iter().map(String::as_str).collect::<Vec<_>>())
            .scopes_always_enforced(),
        issue_refund,
    );
}

async fn read_invoice(ctx: RequestContext, args: ReadInvoiceArgs) -> Result<String, ToolError> {
    authorize(ctx.principal(), "read_invoice")?;
    let invoice = json!({ "invoiceId": args.invoice_id, "status": "open", "amountCents": STUB_INVOICE_AMOUNT_CENTS });
    Ok(invoice.to_string())
}

async fn issue_refund(
    ctx: RequestContext,
    ledger: Arc<dyn RefundLedger>,
    args: IssueRefundArgs,
) -> Result<String, ToolError> {
    authorize(ctx.principal(), "issue_refund")?;
    if args.amount_cents > STUB_INVOICE_AMOUNT_CENTS {
        return Err(ToolError::Execution(format!(
            "refund of {} cents exceeds invoice amount of {STUB_INVOICE_AMOUNT_CENTS} cents",
            args.amount_cents
        )));
    }
    check_outbound("api.payments.example")?;
    ledger.record(&args.invoice_id, args.amount_cents);
    let refund = json!({ "invoiceId": args.invoice_id, "refundedCents": args.amount_cents, "status": "refunded" });
    Ok(refund.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(scopes: &[&str]) -> Vec<String> {
        scopes.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn start_up_validation_refuses_narrow_broad_and_undeclared() {
        let required = required_union();
        assert_eq!(required, ["invoices:read", "refunds:write"]);
        assert!(
            validate_config(&set(&["invoices:read"]), &required, &registered_tool_names())
                .unwrap_err()
                .contains("refunds:write")
        );
        assert!(
            validate_config(
                &set(&["invoices:read", "refunds:write", "tenant:admin"]),
                &required,
                &registered_tool_names()
            )
            .unwrap_err()
            .contains("tenant:admin")
        );
        assert!(validate_config(&required, &required, &registered_tool_names()).is_ok());
        let mut drifted = registered_tool_names();
        drifted.push("rogue_tool");
        assert!(validate_config(&required, &required, &drifted).unwrap_err().contains("rogue_tool"));
        assert_eq!(parse_scopes(" invoices:read, ,refunds:write "), required);
    }

    /// A tool registered without a table entry is listed and called with every scope of the
    /// union, never none (fail closed, as `authorize` is); the guard's list is what `register`
    /// registers, every name of which has its entry.
    #[test]
    fn an_undeclared_tool_needs_the_whole_union() {
        assert_eq!(scopes_of("void_invoice"), required_union());
        assert_eq!(scopes_of(READ_INVOICE), ["invoices:read"]);
        let mut server = McpServer::new("lp", "1");
        register(&mut server, Arc::new(DiscardLedger));
        let listed: Vec<&str> = server.tools.iter().map(|tool| tool.name.as_str()).collect();
        assert_eq!(listed, registered_tool_names());
    }

    #[test]
    fn authorization_fails_closed() {
        let auditor = Principal::verified(Some("user:auditor"), None, set(&["invoices:read"]));
        let treasury = Principal::verified(Some("user:treasury"), None, set(&["invoices:read", "refunds:write"]));
        let nobody = Principal::verified(Some("user:nobody"), None, vec![]);
        let refused = authorize(&auditor, "issue_refund").unwrap_err();
        assert_eq!(refused, "not authorized: sub:user:auditor may not call issue_refund; it lacks refunds:write");
        assert!(authorize(&nobody, "read_invoice").unwrap_err().contains("user:nobody"));
        assert!(authorize(&Principal::anonymous(), "read_invoice").is_err());
        assert!(authorize(&auditor, "undeclared_tool").is_err(), "an undeclared tool needs the whole union");
        assert!(authorize(&treasury, "issue_refund").is_ok());
        assert!(check_outbound("evil.example").is_err() && check_outbound("api.payments.example").is_ok());
    }
}
