// Prints, one per line, the files `vercel deploy` would upload from a project directory, as the
// pinned Vercel CLI itself decides (its own `buildFileTree`, with .vercelignore and the rules it
// adds), so the check cannot drift from what the CLI does.
//
//   node scripts/vercel/upload-files.mjs <project-dir> source      # `vercel deploy`
//   node scripts/vercel/upload-files.mjs <project-dir> prebuilt    # `vercel deploy --prebuilt`
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const [dir, mode] = process.argv.slice(2);
if (!dir || !['source', 'prebuilt'].includes(mode)) {
  console.error('usage: upload-files.mjs <project-dir> source|prebuilt');
  process.exit(2);
}
const root = resolve(dir);
const tools = resolve(fileURLToPath(import.meta.url), '../../../tools/node_modules/vercel/dist/chunks');

// The CLI bundles @vercel/client into one of its chunks; find the one that defines the file
// tree builder rather than naming a chunk hash that changes between CLI builds.
let client;
for (const name of await readdir(tools)) {
  if (!name.endsWith('.js')) continue;
  const source = await readFile(join(tools, name), 'utf8');
  if (!source.includes('function buildFileTree2(')) continue;
  const chunk = await import(join(tools, name));
  for (const [key, value] of Object.entries(chunk)) {
    if (!key.startsWith('require_') || typeof value !== 'function') continue;
    try {
      const candidate = value();
      if (candidate && typeof candidate.buildFileTree === 'function') client = candidate;
    } catch {}
  }
}
if (!client) {
  console.error('upload-files: the pinned Vercel CLI has no buildFileTree (did the CLI version change?)');
  process.exit(1);
}
const { fileList } = await client.buildFileTree(
  root,
  { isDirectory: true, prebuilt: mode === 'prebuilt', vercelOutputDir: join(root, '.vercel', 'output') },
  () => {},
);
for (const file of fileList.map((f) => relative(root, f)).sort()) console.log(file);
