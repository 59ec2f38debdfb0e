// `pnpm bench [suite…]`: runs every suite in bench/suites, or the ones named, one after another.
import fs from 'node:fs';

const suitesDirectory = new URL('./suites/', import.meta.url);
const available = fs
  .readdirSync(suitesDirectory)
  .filter((file) => file.endsWith('.mjs'))
  .map((file) => file.replace(/\.mjs$/, ''))
  .sort();

const requested = process.argv.slice(2).filter((argument) => argument !== '--');
const unknown = requested.filter((name) => !available.includes(name));
if (unknown.length > 0) {
  console.error(`unknown suite(s): ${unknown.join(', ')}; available: ${available.join(', ')}`);
  process.exit(2);
}

for (const name of requested.length > 0 ? requested : available) {
  process.stderr.write(`running suite ${name}\n`);
  const suite = await import(new URL(`${name}.mjs`, suitesDirectory));
  await suite.run();
}
