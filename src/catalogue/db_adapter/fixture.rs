//! The reference's legacy backend: five frozen rows in the binary, no writes possible.
//!
//! This is the embedded default, so the example works with nothing installed. Being immutable
//! data compiled into the binary, it is not cross-call state and is safe on any instance.

use super::{DbError, DbFuture, ProductBackend, ProductRow, Write};

/// One fixture row: id, name, category, price, secret cost.
type FixtureRow = (i64, &'static str, &'static str, i64, i64);

/// The rows, ordered by id. Product 4's name carries a raw terminal escape (ESC `[31m`) so the
/// sanitisation has something to do.
pub const ROWS: &[FixtureRow] = &[
    (1, "Widget", "widgets", 1999, 700),
    (2, "Deluxe Widget", "widgets", 4999, 1800),
    (3, "Gadget", "gadgets", 2999, 1100),
    (4, "Sprocket\u{1b}[31m", "gadgets", 999, 300),
    (5, "Gizmo", "gizmos", 3499, 1400),
];

/// The fixture as a [`ProductBackend`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOnlyStore;

fn row(&(id, name, category, price_cents, secret): &FixtureRow) -> ProductRow {
    ProductRow {
        id,
        name: name.to_owned(),
        category: category.to_owned(),
        price_cents,
        secret_cost_cents: Some(secret),
    }
}

impl ProductBackend for ReadOnlyStore {
    fn select_by_category<'a>(&'a self, category: &'a str, limit: u32) -> DbFuture<'a, Vec<ProductRow>> {
        let rows = ROWS.iter().filter(|r| r.2 == category).take(limit as usize).map(row).collect();
        Box::pin(std::future::ready(Ok(rows)))
    }

    fn select_by_id(&self, id: i64) -> DbFuture<'_, Option<ProductRow>> {
        Box::pin(std::future::ready(Ok(ROWS.iter().find(|r| r.0 == id).map(row))))
    }

    fn categories(&self, limit: u32) -> DbFuture<'_, Vec<String>> {
        let mut categories: Vec<String> = ROWS.iter().map(|r| r.2.to_owned()).collect();
        categories.sort();
        categories.dedup();
        categories.truncate(limit as usize);
        Box::pin(std::future::ready(Ok(categories)))
    }

    fn attempt_write(&self, write: Write) -> DbFuture<'_, ()> {
        Box::pin(std::future::ready(Err(DbError::ReadOnlyViolation(format!(
            "{write:?} refused: the fixture store is read-only"
        )))))
    }

    fn describe(&self) -> String {
        "in-process read-only fixture".into()
    }
}
