//! The local run: every route of the project on 127.0.0.1:$PORT (3000), as Vercel would serve it.

fn main() -> std::io::Result<()> {
    vercel_mcp::local::runtime()?.block_on(async {
        let config = vercel_mcp::parts_or_exit();
        let routes = vercel_mcp::local::Routes::new(&config);
        routes.start_background_work();
        vercel_mcp::local::serve(routes, vercel_mcp::local::port_from_env()?).await
    })
}
