/**
 * Since Deno 2.9.2 a SIGUSR1 sent to any Deno process also starts the V8 inspector server on
 * 127.0.0.1:9229 (Node.js's convention), next to the process's own SIGUSR1 listeners. SIGUSR1 is
 * svc's reload signal: every reload would open a debugger through which any local user could run
 * code as svc (database credentials, session secret). svc therefore holds 127.0.0.1:9229 itself
 * (SO_REUSEPORT, so several svc processes of one user can all hold it; connections are closed at
 * once). Deno then fails to start the inspector ("Failed to start inspector server" on stderr)
 * and the reload goes on. Debug svc with `--inspect=<host:port>` instead (that inspector is
 * already running, so the signal adds nothing).
 *
 * @module
 */
import { log } from "../observe/log.ts";

/** The address Deno's SIGUSR1 inspector binds (fixed in Deno). */
export const SIGNAL_INSPECTOR_PORT = 9229;

/**
 * Holds 127.0.0.1:9229 for the life of the process so SIGUSR1 cannot open an inspector.
 * Returns the listener (null when the port is already taken: by another svc, a real
 * `--inspect`, or another program — in every case Deno's signal inspector cannot bind it either).
 */
export function holdSignalInspectorPort(): Deno.Listener | null {
  let listener: Deno.Listener;
  try {
    const addr = { hostname: "127.0.0.1", port: SIGNAL_INSPECTOR_PORT };
    // Without --unstable-net (a bundle run by hand) it is held alone.
    listener = Deno.listen(reusePortAllowed() ? { ...addr, reusePort: true } : addr);
  } catch (e) {
    log.debug("127.0.0.1:{port} is taken ({error}): SIGUSR1 cannot open an inspector there", {
      port: SIGNAL_INSPECTOR_PORT,
      error: (e as Error).message,
    });
    return null;
  }
  (async () => {
    try {
      for await (const conn of listener) conn.close();
    } catch { /* closed */ }
  })();
  return listener;
}

/**
 * Whether SO_REUSEPORT may be asked for: Deno gates it behind `--unstable-net` and exits the
 * process (not an exception) when it is asked for without; the flag's other APIs tell.
 */
export function reusePortAllowed(): boolean {
  return typeof (Deno as unknown as Record<string, unknown>).listenDatagram === "function";
}
