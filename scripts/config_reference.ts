/** Prints the configuration reference table (Markdown) from the key table, for docs/configuration.md. */
import { KEYS } from "../src/config/keys.ts";

const kind = (k: (typeof KEYS)[number]["kind"]) => typeof k === "object" ? k.enum.join(" \\| ") : k;
const def = (d: unknown) =>
  d === undefined
    ? "unset"
    : d === "dev"
    ? "= dev"
    : Array.isArray(d)
    ? d.join(", ") || "empty"
    : String(d);
console.log("| key | type | default | meaning |\n|---|---|---|---|");
for (const k of KEYS) {
  console.log(
    `| \`${k.key}\` | ${kind(k.kind)} | ${def(k.default).replaceAll("|", "\\|")} | ${
      k.doc.replaceAll("|", "\\|")
    } |`,
  );
}
