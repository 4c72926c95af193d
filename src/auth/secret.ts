/**
 * Loading (or generating on first start) the HMAC secret that signs session JWTs.
 *
 * @module
 */
import { log } from "../observe/log.ts";
import { base64url } from "jose";
import { join } from "node:path";

/** Minimum length of a JWT secret, in bytes. */
export const MIN_SECRET_BYTES = 32;

/** Name of the generated secret file inside the secrets directory. */
export const SECRET_FILE_NAME = "jwt-secret";

/** Raised when the configured or stored JWT secret is unusable. */
export class SecretError extends Error {
  /** Creates a SecretError with `message` (and an optional `cause`). */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "SecretError";
  }
}

/** Options of {@link loadSecret}. */
export interface LoadSecretOptions {
  /** `jwt.secret` from the configuration; when given (even empty) it is used as is. */
  secret?: string;
  /** Directory holding the generated `jwt-secret` file (created when missing). */
  secretsDir: string;
  /**
   * Whether a missing `jwt-secret` file is created (default true: svc's own start); false makes
   * it a {@link SecretError} naming the file (a tool that must sign with an existing secret).
   */
  create?: boolean;
}

const encoder = new TextEncoder();

function checkLength(bytes: Uint8Array, what: string): Uint8Array {
  if (bytes.byteLength < MIN_SECRET_BYTES) {
    throw new SecretError(
      `${what} must be at least ${MIN_SECRET_BYTES} bytes (UTF-8), got ${bytes.byteLength}`,
    );
  }
  return bytes;
}

async function readSecretFile(path: string): Promise<Uint8Array> {
  const text = await Deno.readTextFile(path);
  return checkLength(encoder.encode(text.trim()), `JWT secret file ${path}`);
}

/**
 * Returns the JWT HMAC key: the UTF-8 bytes of `opts.secret` when given (at least 32 bytes,
 * else {@link SecretError}); otherwise the trimmed contents of `<secretsDir>/jwt-secret`,
 * which is created on first use with 64 random bytes encoded as base64url (mode 0o600, the
 * directory 0o700) unless `opts.create` is false. Creation is atomic, so concurrent first starts
 * agree on one secret.
 */
export async function loadSecret(opts: LoadSecretOptions): Promise<Uint8Array> {
  if (opts.secret !== undefined) {
    return checkLength(encoder.encode(opts.secret), "jwt.secret");
  }
  const path = join(opts.secretsDir, SECRET_FILE_NAME);
  try {
    return await readSecretFile(path);
  } catch (err) {
    if (err instanceof SecretError) throw err;
    if (err instanceof Deno.errors.NotFound && opts.create === false) {
      throw new SecretError(`JWT secret file ${path} does not exist`, { cause: err });
    }
    if (!(err instanceof Deno.errors.NotFound)) {
      throw new SecretError(
        `cannot read JWT secret file ${path}: ${String(err)}; set secrets.dir to a directory ` +
          "svc may write, or give jwt.secret",
        { cause: err },
      );
    }
  }

  try {
    const made = await createSecret(opts.secretsDir, path);
    if (made) log.info("generated a JWT secret in {path} (secrets.dir)", { path });
    return made ?? await readSecretFile(path);
  } catch (err) {
    if (err instanceof SecretError) throw err;
    throw new SecretError(
      `cannot create the JWT secret ${path}: ${(err as Error).message}; set secrets.dir to a ` +
        "directory svc may write, or give jwt.secret",
      { cause: err },
    );
  }
}

/**
 * Creates `<dir>/jwt-secret` with a new secret: its bytes, or null when another process created
 * it first (then read that one).
 */
async function createSecret(dir: string, path: string): Promise<Uint8Array | null> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const text = base64url.encode(crypto.getRandomValues(new Uint8Array(64)));
  // Write the full secret to a private temp file, then hard-link it into place: the link
  // fails if another process won the race, and readers never see a partial file.
  const tmp = join(dir, `.${SECRET_FILE_NAME}.${crypto.randomUUID()}.tmp`);
  try {
    await Deno.writeTextFile(tmp, text + "\n", { mode: 0o600, createNew: true });
    if (Deno.build.os !== "windows") await Deno.chmod(tmp, 0o600); // not subject to umask
    try {
      await Deno.link(tmp, path);
    } catch (err) {
      if (err instanceof Deno.errors.AlreadyExists) return null;
      throw err;
    }
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
  return encoder.encode(text);
}
