/**
 * The keys of Durable Streams subscriptions (docs/http.md, subscriptions): the Ed25519 key that
 * signs webhook deliveries, published as a JWK Set, and the tokens that authorise a wake's
 * callback, ack and release.
 *
 * The signing key is read from `keyFile` when there is one (written there, owner-only, the
 * first time), so receivers keep verifying across restarts; without one it lives as long as the
 * process. Its `kid` is `ds_` and the key's JWK thumbprint (RFC 7638). Wake tokens are HMACs of
 * the subscription, generation and wake under a secret derived from the key, so they need no
 * storage and a token of one wake never passes for another.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';

/** A webhook's signing key, its public JWK and what signs with it. */
export class WebhookKeys {
  readonly kid: string;
  private readonly jwk: Record<string, string>;
  private readonly tokenSecret: Buffer;

  private constructor(private readonly privateKey: crypto.KeyObject) {
    const { crv, kty, x } = crypto.createPublicKey(privateKey).export({ format: 'jwk' }) as Record<string, string>;
    // RFC 7638: the thumbprint hashes the required members in lexicographic order, no spaces.
    const thumbprint = crypto.createHash('sha256').update(JSON.stringify({ crv, kty, x })).digest('base64url');
    this.kid = `ds_${thumbprint}`;
    this.jwk = { kty: kty!, crv: crv!, kid: this.kid, use: 'sig', alg: 'EdDSA', x: x! };
    const raw = privateKey.export({ format: 'der', type: 'pkcs8' });
    this.tokenSecret = crypto.createHash('sha256').update('streamstack wake tokens').update(raw).digest();
  }

  /** The key in `keyFile` (made there if the file does not exist), or a key of this process only. */
  static load(keyFile: string | undefined): WebhookKeys {
    if (keyFile === undefined) return new WebhookKeys(crypto.generateKeyPairSync('ed25519').privateKey);
    if (!fs.existsSync(keyFile)) {
      const pem = crypto.generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' });
      // `wx`: two servers starting at once never overwrite each other's key.
      try {
        fs.writeFileSync(keyFile, pem, { mode: 0o600, flag: 'wx' });
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
    }
    return new WebhookKeys(crypto.createPrivateKey(fs.readFileSync(keyFile)));
  }

  /** The JWK Set receivers verify with. */
  jwks(): { keys: Record<string, string>[] } {
    return { keys: [{ ...this.jwk }] };
  }

  /** The `Webhook-Signature` header of `body` sent at `nowMs`: an Ed25519 signature of `t.body`. */
  signature(body: string, nowMs: number): string {
    const t = Math.floor(nowMs / 1000);
    const signed = crypto.sign(null, Buffer.from(`${t}.${body}`), this.privateKey).toString('base64url');
    return `t=${t},kid=${this.kid},ed25519=${signed}`;
  }

  /** The token of one wake of one subscription. */
  wakeToken(subscription: string, generation: number, wakeId: string): string {
    return crypto
      .createHmac('sha256', this.tokenSecret)
      .update(`${subscription}\n${generation}\n${wakeId}`)
      .digest('base64url');
  }

  /** True when `token` is the token of that wake (compared in constant time). */
  isWakeToken(token: string, subscription: string, generation: number, wakeId: string): boolean {
    const expected = Buffer.from(this.wakeToken(subscription, generation, wakeId));
    const given = Buffer.from(token);
    return given.length === expected.length && crypto.timingSafeEqual(given, expected);
  }
}
