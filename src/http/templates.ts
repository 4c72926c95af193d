/**
 * Eta templates from `http.templates.path` (auto-escaping on, compiled templates cached until
 * `reload()`, which SIGUSR1 triggers through a runtime reload hook). A template renders a
 * route's `content` as `it`, with the response's CSP nonce at `it.nonce`. Names are checked
 * before Eta sees them: no absolute path, no `.`/`..`/dot segment, no backslash or NUL, and the
 * file's real path (symlinks resolved) must stay inside the directory.
 */
import { Eta } from "eta";
import { SvcError } from "../svc_error.ts";
import { log } from "../observe/log.ts";
import { templateFile } from "../state/template_files.ts";

/** Renders named templates from one directory. */
export class Templates {
  #eta: Eta;
  #root: string | null = null;

  /** `dir` is `http.templates.path`; `dev` puts render errors in the response body. */
  constructor(readonly dir: string, readonly dev = false) {
    this.#eta = this.#make();
  }

  #make(): Eta {
    return new Eta({ views: this.dir, autoEscape: true, cache: true, defaultExtension: ".eta" });
  }

  /** Drops every cached template (the next render reads the files again). */
  reload(): void {
    this.#eta = this.#make();
    this.#root = null;
  }

  /**
   * Renders template `name` (`.eta` added when it has no extension) with `it` (an object's keys
   * are kept; any other value is at `it.content`) and `it.nonce` set. A bad name, a missing
   * template or a render error is SvcError INTERNAL (500) with the name logged; in dev mode
   * the body's details carry the name and the reason.
   */
  async render(name: string, it: unknown, nonce: string): Promise<string> {
    const data: Record<string, unknown> =
      it !== null && typeof it === "object" && !Array.isArray(it)
        ? { ...(it as Record<string, unknown>), nonce }
        : { content: it, nonce };
    try {
      const file = await this.#check(name);
      return await this.#eta.renderAsync(file, data);
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      log.error("template {name} failed: {reason}", { name, reason });
      throw new SvcError(
        "INTERNAL",
        this.dev ? `template ${JSON.stringify(name)} failed: ${reason}` : "internal error",
        this.dev ? { details: { template: name, reason } } : {},
      );
    }
  }

  /** The name Eta gets (relative to the directory), after checking it stays inside. */
  async #check(name: string): Promise<string> {
    if (name === "" || name.startsWith("/") || /[\\\0]/.test(name)) {
      throw new Error(`template name not allowed: ${JSON.stringify(name)}`);
    }
    const segments = name.split("/");
    if (segments.some((s) => s === "" || s.startsWith("."))) {
      throw new Error(`template name not allowed: ${JSON.stringify(name)}`);
    }
    const file = templateFile(name);
    this.#root ??= await Deno.realPath(this.dir);
    let real: string;
    try {
      real = await Deno.realPath(`${this.#root}/${file}`);
    } catch {
      throw new Error(`template not found: ${file}`);
    }
    if (!real.startsWith(this.#root + "/")) {
      throw new Error(`template outside the templates directory: ${file}`);
    }
    return `/${file}`;
  }
}
