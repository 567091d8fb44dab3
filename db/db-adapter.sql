-- The db-adapter example's table and read-only role. Run once as an administrator:
--   psql "postgres://postgres@127.0.0.1:5432/test" -f db/db-adapter.sql
-- then point the server at the reader role:
--   DATABASE_URL=postgres://mcp_products_reader@127.0.0.1:5432/test
-- (in production give the role a password and keep the URL in a sensitive environment variable).
-- Idempotent: safe to run again.

SELECT pg_advisory_lock(731001);

CREATE TABLE IF NOT EXISTS products (
    id                bigint PRIMARY KEY,
    name              text   NOT NULL,
    category          text   NOT NULL,
    price_cents       bigint NOT NULL,
    secret_cost_cents bigint NOT NULL
);

INSERT INTO products (id, name, category, price_cents, secret_cost_cents) VALUES
    (1, 'Widget',                 'widgets', 1999,  700),
    (2, 'Deluxe Widget',          'widgets', 4999, 1800),
    (3, 'Gadget',                 'gadgets', 2999, 1100),
    (4, E'Sprocket\x1b[31m',      'gadgets',  999,  300),
    (5, 'Gizmo',                  'gizmos',  3499, 1400)
ON CONFLICT (id) DO NOTHING;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mcp_products_reader') THEN
        CREATE ROLE mcp_products_reader LOGIN;
    END IF;
END
$$;

-- Least privilege: read four columns of one table; the secret column is not readable at all.
REVOKE ALL ON products FROM mcp_products_reader;
GRANT SELECT (id, name, category, price_cents) ON products TO mcp_products_reader;
ALTER ROLE mcp_products_reader SET default_transaction_read_only = on;

SELECT pg_advisory_unlock(731001);
