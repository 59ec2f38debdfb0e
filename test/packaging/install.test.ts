/**
 * The packages as a Node user gets them: every public workspace package is packed with
 * `pnpm -r pack`, and the tarballs are installed with npm into empty folders outside the
 * repository, with no Rust toolchain on the PATH, so nothing can be compiled and nothing can be
 * found in the workspace. One install names the platform package's tarball (npm never resolves an
 * optional dependency to a local file), as the registry would supply it on x64 Linux; the other
 * omits optional dependencies, as on a platform with no prebuilt binary. A script run in each
 * folder (install-check.mjs) uses the store end to end and reports which kernels load and from
 * where; the CLI is run from the first folder's node_modules/.bin. A third folder gets the light
 * client alone (the client's and the protocol's tarballs): it must stay small, hold nothing
 * native, and talk to a server run by the first folder's installed CLI (client-check.mjs). No
 * install may warn EBADENGINE: every package claims Node 20.15, so on Node 20 a dependency that
 * wants a later Node shows here. A program that uses the embedded and the remote store as one
 * (types-check.ts) is type-checked against the first folder's shipped declarations.
 *
 * Third-party dependencies (commander, cli-progress, apache-arrow, parquet-wasm and theirs) come
 * from npm's cache when it has them and from the registry otherwise (`--prefer-offline`). With a
 * warm cache the whole file takes about 40 seconds on two cores, most of it the installs, the
 * type check and the CLI's process starts; with an empty cache (about 18 MB from the registry)
 * about 50.
 *
 * Packages are found by asking pnpm for the workspace's public packages, so a new one (a server,
 * a client) is packed and installed here as soon as it drops `private`.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const repository = fileURLToPath(new URL('../..', import.meta.url));
const checkScript = fileURLToPath(new URL('./install-check.mjs', import.meta.url));
const clientCheckScript = fileURLToPath(new URL('./client-check.mjs', import.meta.url));
const typesCheck = fileURLToPath(new URL('./types-check.ts', import.meta.url));
const tsc = path.join(repository, 'node_modules', 'typescript', 'bin', 'tsc');

const platformPackage = '@streamstack/native-linux-x64-gnu';
const binaryName = 'streamstack-native.linux-x64-gnu.node';
/** A cold npm cache downloads the dependencies from the registry; that must not time out. */
const installTimeoutMs = 600_000;
/**
 * The most the light client may take installed (its node_modules, client and dependencies), in
 * bytes: the budget of issue 36, a tenth of the engine's install (about 27 MB with Arrow, Parquet
 * WebAssembly and the binary). The client and the protocol take about 110 KB today; a dependency
 * that brings in the engine or anything like it breaks the budget at once.
 */
const lightClientBytesMax = 3 * 1024 * 1024;

interface WorkspacePackage {
  readonly name: string;
  readonly version: string;
  readonly path: string;
  readonly private: boolean;
}

interface PackedPackage {
  readonly name: string;
  readonly version: string;
  readonly filename: string;
  readonly files: readonly { readonly path: string }[];
}

interface Manifest {
  readonly name: string;
  readonly version: string;
  readonly [field: string]: unknown;
}

interface ClientCheckResult {
  readonly commit: { commit: number; records: number };
  readonly records: { key: string; position: number; payload: number[] }[];
  readonly missing: { instance: boolean; oneClass: boolean; name?: string; code?: string };
  readonly engine: string | null;
  readonly addons: string[];
}

interface CheckResult {
  readonly storeKernels: string;
  readonly commit: { commit: number; records: number };
  readonly records: { key: string; position: number; payload: string }[];
  readonly byKey: string;
  readonly auto: string;
  readonly native: { name?: string; code?: string; message?: string };
  readonly addons: string[];
  readonly platformPackage: string | null;
  readonly nativePackage: string | null;
}

/** The workspace's packages meant for users: all but the root and those marked `private`. */
function publicPackages(): WorkspacePackage[] {
  const listed = spawnSync('pnpm', ['-r', 'ls', '--depth', '-1', '--json'], { cwd: repository, encoding: 'utf8' });
  if (listed.status !== 0) throw new Error(`pnpm ls failed: ${listed.stderr}`);
  return (JSON.parse(listed.stdout) as WorkspacePackage[]).filter(
    (pkg) => !pkg.private && path.resolve(pkg.path) !== path.resolve(repository),
  );
}

/** PATH without any directory that holds a Rust toolchain (cargo, rustc, rustup). */
function pathWithoutRust(): string {
  const rustTools = ['cargo', 'rustc', 'rustup'];
  return (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir !== '' && !rustTools.some((tool) => fs.existsSync(path.join(dir, tool))))
    .join(path.delimiter);
}

/**
 * The environment of a user's shell: the PATH without Rust, and none of the variables that pnpm
 * and vitest set for their children (pnpm's `npm_config_*` would change how npm installs, and
 * `NODE_OPTIONS` could load the test runner's hooks). Network settings for npm stay.
 */
function userEnvironment(): NodeJS.ProcessEnv {
  const keptNpmSettings = /^npm_config_(registry|cache|userconfig|cafile|strict_ssl|(https_|http_|no_)?proxy)$/i;
  const environment: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^npm_/i.test(name) && !keptNpmSettings.test(name)) continue;
    if (/^(PNPM_|VITEST|NODE_OPTIONS$|NODE_PATH$|STREAMSTACK_)/.test(name)) continue;
    environment[name] = value;
  }
  environment.PATH = pathWithoutRust();
  return environment;
}

function commandFound(command: string, environment: NodeJS.ProcessEnv): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { env: environment }).status === 0;
}

function readManifest(tarball: string): Manifest {
  const extracted = spawnSync('tar', ['-xzOf', tarball, 'package/package.json'], { encoding: 'utf8' });
  if (extracted.status !== 0) throw new Error(`cannot read package.json from ${tarball}: ${extracted.stderr}`);
  return JSON.parse(extracted.stdout) as Manifest;
}

interface Installed {
  readonly folder: string;
  /** What npm printed, warnings included (`EBADENGINE` is a warning). */
  readonly output: string;
}

/** An empty project folder with the given tarballs installed by npm, and the check scripts. */
async function install(
  tarballs: readonly string[],
  extraArguments: readonly string[],
  environment: NodeJS.ProcessEnv,
): Promise<Installed> {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-install-'));
  fs.writeFileSync(
    path.join(folder, 'package.json'),
    `${JSON.stringify({ name: 'install-check', private: true, type: 'module' })}\n`,
  );
  const { stdout, stderr } = await run(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=warn', ...extraArguments, ...tarballs],
    { cwd: folder, env: environment, timeout: installTimeoutMs, maxBuffer: 16 << 20 },
  );
  fs.copyFileSync(checkScript, path.join(folder, 'install-check.mjs'));
  fs.copyFileSync(clientCheckScript, path.join(folder, 'client-check.mjs'));
  fs.copyFileSync(typesCheck, path.join(folder, 'types-check.ts'));
  return { folder, output: `${stdout}${stderr}` };
}

/** Every file under `directory` (symbolic links not followed), with its size in bytes. */
function filesUnder(directory: string): { file: string; bytes: number }[] {
  return fs.readdirSync(directory, { recursive: true, encoding: 'utf8' }).flatMap((name) => {
    const file = path.join(directory, name);
    const stat = fs.lstatSync(file);
    return stat.isFile() ? [{ file, bytes: stat.size }] : [];
  });
}

/**
 * Runs the installed `streamstack serve` from `folder` on a free port over a new data directory,
 * calls `use` with its URL, then stops it with SIGTERM and expects a clean exit.
 */
async function withInstalledServer(
  folder: string,
  environment: NodeJS.ProcessEnv,
  use: (url: string) => Promise<void>,
): Promise<void> {
  const bin = path.join(folder, 'node_modules', '.bin', 'streamstack');
  const child = spawn(bin, ['--data', path.join(folder, 'served-data'), 'serve', '--port', '0'], {
    cwd: folder,
    env: environment,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk) => {
        output += String(chunk);
        const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.stderr.on('data', (chunk) => (output += String(chunk)));
      void exited.then(() => reject(new Error(`serve exited early: ${output}`)));
    });
    await use(url);
  } finally {
    child.kill('SIGTERM');
    expect(await exited, output).toBe(0);
  }
}

function check(folder: string, environment: NodeJS.ProcessEnv): CheckResult {
  const result = spawnSync(process.execPath, ['install-check.mjs'], {
    cwd: folder,
    env: environment,
    encoding: 'utf8',
  });
  if (result.status !== 0) throw new Error(`install-check.mjs failed in ${folder}:\n${result.stderr}`);
  return JSON.parse(result.stdout) as CheckResult;
}

describe('installable packages', () => {
  const scratch: string[] = [];
  const environment = userEnvironment();
  let packed: PackedPackage[] = [];
  let manifests = new Map<string, Manifest>();
  let withBinary = '';
  let withoutBinary = '';
  let lightClient = '';
  let npmOutputs: string[] = [];

  beforeAll(async () => {
    // The native build copies its binary into the platform package (napi artifacts); a stale or
    // missing copy would ship a binary other than the one the rest of the suite tests.
    const built = path.join(repository, 'native', binaryName);
    const shipped = path.join(repository, 'native', 'npm', 'linux-x64-gnu', binaryName);
    if (!fs.existsSync(shipped) || !fs.readFileSync(built).equals(fs.readFileSync(shipped))) {
      throw new Error(`${shipped} is missing or differs from ${built}; run \`pnpm build\` first`);
    }

    const destination = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-tarballs-'));
    scratch.push(destination);
    const filters = publicPackages().flatMap((pkg) => ['--filter', pkg.name]);
    const packing = spawnSync('pnpm', ['-r', ...filters, 'pack', '--pack-destination', destination, '--json'], {
      cwd: repository,
      encoding: 'utf8',
    });
    if (packing.status !== 0) throw new Error(`pnpm pack failed: ${packing.stderr}`);
    packed = JSON.parse(packing.stdout) as PackedPackage[];
    manifests = new Map(packed.map((pkg) => [pkg.name, readManifest(pkg.filename)]));

    const platformTarball = packed.find((pkg) => pkg.name === platformPackage)?.filename;
    if (platformTarball === undefined) throw new Error(`${platformPackage} was not packed`);
    const others = packed.filter((pkg) => pkg.name !== platformPackage).map((pkg) => pkg.filename);
    const light = packed
      .filter((pkg) => pkg.name === '@streamstack/client' || pkg.name === '@streamstack/protocol')
      .map((pkg) => pkg.filename);
    if (light.length !== 2) throw new Error('@streamstack/client and @streamstack/protocol were not both packed');
    // All three installs at once: they share npm's cache, which is safe for concurrent use.
    const installs = await Promise.all([
      install([...others, platformTarball], [], environment),
      install(others, ['--omit=optional'], environment),
      install(light, [], environment),
    ]);
    [withBinary, withoutBinary, lightClient] = installs.map((installed) => installed.folder);
    npmOutputs = installs.map((installed) => installed.output);
    scratch.push(withBinary, withoutBinary, lightClient);
  }, installTimeoutMs + 60_000);

  afterAll(() => {
    for (const dir of scratch) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('installs with no Rust toolchain on the PATH', () => {
    expect(commandFound('node', environment) && commandFound('npm', environment)).toBe(true);
    expect(commandFound('cargo', environment)).toBe(false);
    expect(commandFound('rustc', environment)).toBe(false);
  });

  it('packs the engine, the CLI, the server, the client, the protocol, the native loader and its platform package', () => {
    expect([...manifests.keys()]).toEqual(
      expect.arrayContaining([
        '@streamstack/engine',
        '@streamstack/cli',
        '@streamstack/server',
        '@streamstack/client',
        '@streamstack/protocol',
        '@streamstack/native',
        platformPackage,
      ]),
    );
  });

  it('warns of no unsupported engine: no dependency wants a later Node than the packages claim', () => {
    expect(npmOutputs).toHaveLength(3);
    for (const output of npmOutputs) expect(output).not.toMatch(/EBADENGINE|Unsupported engine/i);
  });

  it('gives the client the protocol as its one dependency, and the protocol none', () => {
    expect(manifests.get('@streamstack/client')?.dependencies).toEqual({ '@streamstack/protocol': '0.1.0' });
    expect(manifests.get('@streamstack/protocol')?.dependencies ?? {}).toEqual({});
    expect(manifests.get('@streamstack/engine')?.dependencies).toMatchObject({ '@streamstack/protocol': '0.1.0' });
  });

  it('installs the light client small and without anything native or WebAssembly', () => {
    const modules = path.join(lightClient, 'node_modules');
    const files = filesUnder(modules);
    const bytes = files.reduce((sum, { bytes }) => sum + bytes, 0);
    expect(bytes).toBeLessThanOrEqual(lightClientBytesMax);
    expect(files.filter(({ file }) => /\.(node|wasm)$/.test(file))).toEqual([]);
    expect(fs.readdirSync(modules).filter((name) => !name.startsWith('.'))).toEqual(['@streamstack']);
    expect(fs.readdirSync(path.join(modules, '@streamstack')).sort()).toEqual(['client', 'protocol']);
  });

  it('runs the light client against a server from the full install', async () => {
    let result: ClientCheckResult | undefined;
    await withInstalledServer(withBinary, environment, async (url) => {
      const { stdout } = await run(process.execPath, ['client-check.mjs', url], { cwd: lightClient, env: environment });
      result = JSON.parse(stdout) as ClientCheckResult;
    });
    expect(result?.commit).toEqual({ commit: 1, records: 2 });
    expect(result?.records).toEqual([
      { key: 'order-1', position: 1, payload: [...Buffer.from('{"id":1}')] },
      { key: 'bytes', position: 2, payload: [0xff, 0x00, 0x7f] },
    ]);
    expect(result?.missing).toEqual({
      instance: true,
      oneClass: true,
      name: 'StreamStackError',
      code: 'FEED_NOT_FOUND',
    });
    expect(result?.engine).toBeNull();
    expect(result?.addons).toEqual([]);
  });

  it('type-checks the embedded and the remote store as one against the shipped declarations', async () => {
    // skipLibCheck stays off: with it on, a declaration that imports a package not installed
    // (the client's reaching for the engine) would turn its types into `any` without an error.
    // @types/node comes with apache-arrow's dependencies.
    const args = [
      '--noEmit',
      '--strict',
      '--module',
      'nodenext',
      '--moduleResolution',
      'nodenext',
      '--target',
      'es2022',
      '--skipLibCheck',
      'false',
    ];
    // tsc prints its errors on stdout: the failure shows them.
    const errors = await run(process.execPath, [tsc, ...args, 'types-check.ts'], {
      cwd: withBinary,
      env: environment,
    }).then(
      () => '',
      (error: { stdout?: string; message: string }) => error.stdout || error.message,
    );
    expect(errors).toBe('');
  });

  it('replaces workspace: ranges with the exact versions of the packages packed with them', () => {
    const versions = new Map(packed.map((pkg) => [pkg.name, pkg.version]));
    for (const manifest of manifests.values()) {
      for (const field of ['dependencies', 'optionalDependencies', 'peerDependencies']) {
        for (const [name, range] of Object.entries((manifest[field] ?? {}) as Record<string, string>)) {
          expect(range, `${manifest.name} ${field} ${name}`).not.toMatch(/^workspace:/);
          if (versions.has(name)) expect(range, `${manifest.name} ${field} ${name}`).toBe(versions.get(name));
        }
      }
      expect(manifest.engines, `${manifest.name} engines`).toEqual({ node: expect.stringMatching(/^>=/) });
    }
    expect(manifests.get('@streamstack/native')?.optionalDependencies).toEqual({ [platformPackage]: '0.1.0' });
    expect(manifests.get(platformPackage)).toMatchObject({
      os: ['linux'],
      cpu: ['x64'],
      libc: ['glibc'],
      main: binaryName,
    });
  });

  it('ships built code and the binary once, and no sources, tests or source maps', () => {
    const files = new Map(packed.map((pkg) => [pkg.name, pkg.files.map((file) => file.path)]));
    const engine = files.get('@streamstack/engine') ?? [];
    expect(engine).toEqual(expect.arrayContaining(['dist/index.js', 'dist/index.d.ts', 'package.json']));
    expect(files.get('@streamstack/cli')).toEqual(expect.arrayContaining(['bin/streamstack.js', 'dist/main.js']));
    expect(files.get('@streamstack/native')?.sort()).toEqual(['index.d.ts', 'index.js', 'package.json']);
    expect(files.get(platformPackage)).toContain(binaryName);
    for (const [name, list] of files) {
      const stray = list.filter(
        (file) =>
          /^(src|test)\//.test(file) || /\.(map|ts)$/.test(file.replace(/\.d\.ts$/, '')) || /\.test\./.test(file),
      );
      expect(stray, name).toEqual([]);
      if (name !== platformPackage)
        expect(
          list.some((file) => file.endsWith('.node')),
          name,
        ).toBe(false);
    }
  });

  it('runs the store end to end on the shipped binary, loaded from the platform package', () => {
    const result = check(withBinary, environment);
    expect(result.commit).toEqual({ commit: 1, records: 2 });
    expect(result.records).toEqual([
      { key: 'order-1', position: 1, payload: '{"id":1}' },
      { key: 'order-2', position: 2, payload: '{"id":2}' },
    ]);
    expect(result.byKey).toBe('{"id":2}');
    expect(result.storeKernels).toBe('native');
    expect(result.auto).toBe('native');
    expect(result.native).toEqual({ name: 'native' });
    const shipped = path.join(fs.realpathSync(withBinary), 'node_modules', platformPackage, binaryName);
    expect(result.addons.map((file) => fs.realpathSync(file))).toEqual([shipped]);
    expect(result.nativePackage?.startsWith(fs.realpathSync(withBinary))).toBe(true);
  });

  it('runs the installed streamstack command, Parquet export included', () => {
    const bin = path.join(withBinary, 'node_modules', '.bin', 'streamstack');
    const data = path.join(withBinary, 'cli-data');
    const cli = (args: string[], input = '') => {
      const result = spawnSync(bin, ['--data', data, ...args], {
        cwd: withBinary,
        env: environment,
        input,
        encoding: 'utf8',
      });
      expect(result.status, `streamstack ${args.join(' ')}: ${result.stderr}`).toBe(0);
      return result.stdout
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>);
    };
    expect(cli(['feed', 'create', 'events'])[0]).toMatchObject({ feed: 'events', commits: 0 });
    expect(cli(['append', 'events'], '{"payload":{"n":1},"key":"a"}\n{"payload":"two","key":"b"}\n')[0]).toMatchObject({
      commit: 1,
      records: 2,
    });
    expect(cli(['read', 'events']).map((line) => [line.key, line.payload])).toEqual([
      ['a', '{"n":1}'],
      ['b', 'two'],
    ]);
    // More lines than one batch of the CLI's go through a stream of its own: still one commit.
    const many = Array.from({ length: 25_000 }, (_, index) => `{"payload":"line ${index}"}\n`).join('');
    expect(cli(['append', 'events', '--message', 'bulk'], many)).toEqual([
      expect.objectContaining({ commit: 2, records: 25_000, message: 'bulk' }),
    ]);
    expect(cli(['info'])[0]).toMatchObject({ kernels: 'native', storeFormat: 1 });
    const out = path.join(withBinary, 'parquet');
    expect(cli(['export', 'events', '--format', 'parquet', '--out', out])[0]).toMatchObject({
      records: 25_002,
      files: 1,
    });
    expect(fs.readFileSync(path.join(out, 'part-000000.parquet')).subarray(0, 4).toString()).toBe('PAR1');
  });

  it('without the platform package, auto falls back to the ts kernels and native fails typed', () => {
    expect(fs.existsSync(path.join(withoutBinary, 'node_modules', platformPackage))).toBe(false);
    const result = check(withoutBinary, environment);
    expect(result.platformPackage).toBeNull();
    expect(result.addons).toEqual([]);
    expect(result.records.map((record) => record.payload)).toEqual(['{"id":1}', '{"id":2}']);
    expect(result.storeKernels).toBe('ts');
    expect(result.auto).toBe('ts');
    expect(result.native).toMatchObject({ code: 'NATIVE_UNAVAILABLE', name: 'StreamStackError' });
    expect(result.native.message).toContain(platformPackage);
  });
});
