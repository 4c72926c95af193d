/** SAML 2.0 login (placeholder while being built). */
import type { Config, SamlConfig } from "../config/load.ts";
import type { RequestRole } from "../db/pool.ts";
import type { CallbackDeps, CallbackOutcome } from "./callback.ts";
import { Lazy } from "./common.ts";
import type { StateCookies } from "./state.ts";

/** One `saml.<name>` entry. */
export class SamlEntry {
  readonly lazy: Lazy<never>;
  /** Creates the entry. */
  constructor(
    readonly name: string,
    readonly entry: SamlConfig,
    readonly cfg: Config,
    readonly states: StateCookies,
    readonly deps: CallbackDeps,
  ) {
    this.lazy = new Lazy(`saml.${name}`, () => Promise.reject(new Error("not built yet")));
  }
  /** Login. */
  async login(_req: Request): Promise<Response> {
    return await this.lazy.get();
  }
  /** ACS. */
  async acs(_req: Request, _who: RequestRole): Promise<CallbackOutcome> {
    return await this.lazy.get();
  }
  /** Metadata. */
  async metadata(): Promise<Response> {
    return await this.lazy.get();
  }
}
