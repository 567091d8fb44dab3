// A real browser calls the MCP endpoint from another origin.
//
//   node tests/browser/cors.mjs <path to the local-run binary>
//
// Starts the local run (its default allowlist: any loopback origin) and a page server on another
// loopback port, then drives Debian's Chromium (playwright-core, executablePath /usr/bin/chromium)
// to load the page twice:
//   - from http://127.0.0.1:<page port>, an allowed origin: `fetch` lists the tools, calls echo,
//     and reads the x-mcp-request-id response header (exposed by CORS); a 2025-11-25 client's GET
//     and DELETE pass the preflight and read the endpoint's 405;
//   - from http://evil.test:<page port>, a disallowed origin (the browser resolves evil.test to
//     127.0.0.1, so no traffic leaves the machine): the preflight is refused and `fetch` fails.
// Prints `browser: N passed, N failed` and exits non-zero on any failure.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';

const root = resolve(fileURLToPath(import.meta.url), '../../..');
const require = createRequire(resolve(root, 'tools/package.json'));
const { chromium } = require('playwright-core');
const binary = process.argv[2];
const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!binary || !existsSync(binary)) throw new Error(`usage: cors.mjs <local-run binary> (got ${binary})`);
if (!existsSync(browserPath)) throw new Error(`no Chromium at ${browserPath}: apt-get install chromium`);

let passed = 0;
let failed = 0;
function check(name, ok, detail) {
  if (ok) passed += 1; else failed += 1;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : `: ${detail}`}`);
}

// The page: what a browser-based MCP client does, in a dozen lines.
const page = `<!doctype html><meta charset="utf-8"><title>client</title><script>
const meta = {'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}};
async function rpc(url, id, method, params, name) {
  const headers = {'Content-Type': 'application/json', 'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': method};
  if (name) headers['Mcp-Name'] = name;
  const response = await fetch(url, {method: 'POST', headers, body: JSON.stringify({jsonrpc: '2.0', id, method, params: {...params, _meta: meta}})});
  return {status: response.status, requestId: response.headers.get('x-mcp-request-id'), body: await response.json()};
}
async function run(url) {
  try {
    const list = await rpc(url, 1, 'tools/list', {});
    const echo = await rpc(url, 2, 'tools/call', {name: 'echo', arguments: {message: 'from the browser'}}, 'echo');
    return {ok: true, tools: list.body.result.tools.map((t) => t.name), echo: echo.body.result.content[0].text, requestId: echo.requestId, status: echo.status};
  } catch (error) {
    return {ok: false, error: String(error)};
  }
}
// What a 2025-11-25 client does besides POST: open its stream with GET (sending the session id and
// Last-Event-ID), and end its session with DELETE. The endpoint serves neither; the client must
// read the 405 (which it handles) rather than fail the preflight (which it does not).
async function legacyExtras(url) {
  const headers = {'Mcp-Session-Id': 'a-session', 'MCP-Protocol-Version': '2025-11-25'};
  try {
    const stream = await fetch(url, {method: 'GET', headers: {...headers, Accept: 'text/event-stream', 'Last-Event-ID': '1'}});
    const end = await fetch(url, {method: 'DELETE', headers});
    return {ok: true, statuses: [stream.status, end.status]};
  } catch (error) {
    return {ok: false, error: String(error)};
  }
}
</script>`;

const children = [];
const cleanup = () => children.forEach((child) => child.kill('SIGKILL'));
process.on('exit', cleanup);

async function startLocalRun() {
  const child = spawn(binary, [], { env: { ...process.env, PORT: '0', MCP_ALLOWED_ORIGINS: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  const deadline = Date.now() + 30_000;
  for await (const chunk of child.stdout) {
    output += chunk;
    const match = output.match(/listening on http:\/\/127\.0\.0\.1:(\d+)\/api\/mcp/);
    if (match) return Number(match[1]);
    if (Date.now() > deadline) break;
  }
  throw new Error(`the local run did not start: ${output}`);
}

const serverPort = await startLocalRun();
const pages = createServer((request, response) => {
  response.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
  response.end(page);
});
pages.listen(0, '127.0.0.1');
await once(pages, 'listening');
const pagePort = pages.address().port;
const endpoint = `http://localhost:${serverPort}/api/mcp`;

const browser = await chromium.launch({
  executablePath: browserPath,
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync',
    // The disallowed origin is a name the browser resolves to loopback; nothing leaves the machine.
    '--host-resolver-rules=MAP evil.test 127.0.0.1',
  ],
});
try {
  const tab = await browser.newPage();
  await tab.goto(`http://127.0.0.1:${pagePort}/`);
  const allowed = await tab.evaluate((url) => run(url), endpoint);
  check('an allowed origin (another loopback port) reaches the endpoint', allowed.ok, JSON.stringify(allowed));
  check('it lists the tools', allowed.ok && allowed.tools.includes('echo'), JSON.stringify(allowed.tools));
  check('it calls echo', allowed.ok && allowed.echo === 'from the browser', JSON.stringify(allowed.echo));
  check('it reads x-mcp-request-id', allowed.ok && typeof allowed.requestId === 'string' && allowed.requestId.length > 0,
    JSON.stringify(allowed.requestId));
  const extras = await tab.evaluate((url) => legacyExtras(url), endpoint);
  check('a 2025-11-25 client reads 405 for its GET stream and its DELETE', extras.ok && extras.statuses.join() === '405,405',
    JSON.stringify(extras));

  await tab.goto(`http://evil.test:${pagePort}/`);
  const origin = await tab.evaluate(() => window.location.origin);
  check('the second page runs on another origin', origin === `http://evil.test:${pagePort}`, origin);
  const refused = await tab.evaluate((url) => run(url), endpoint);
  check('a disallowed origin cannot call the endpoint', !refused.ok && /fetch/i.test(refused.error), JSON.stringify(refused));
  // The refusal was the server's, not a network error: the same request without a browser gets 403.
  const direct = await fetch(endpoint, { method: 'OPTIONS', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST' } });
  check('the server refuses that origin with 403 and no CORS headers',
    direct.status === 403 && direct.headers.get('access-control-allow-origin') === null, String(direct.status));
} finally {
  await browser.close();
  pages.close();
  cleanup();
}
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
