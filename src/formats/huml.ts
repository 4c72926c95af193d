/**
 * HUML v0.2.0 parser (https://huml.io). A small hand-written, line-oriented
 * recursive-descent parser with no dependencies.
 *
 * Values map to JSON-like JavaScript values: dicts become plain objects, lists
 * arrays, and every number (integers included) a `number`, so integers beyond
 * 2^53 lose precision exactly as `JSON.parse` would.
 *
 * @module
 */

/** A HUML syntax error, with the 1-based `line` and `column` where it was detected. */
export class HumlError extends Error {
  /** 1-based line number. */
  readonly line: number;
  /** 1-based column number, counted in Unicode code points. */
  readonly column: number;

  /** Creates an error whose message is prefixed with `line:column`. */
  constructor(message: string, line: number, column: number) {
    super(`${line}:${column}: ${message}`);
    this.name = "HumlError";
    this.line = line;
    this.column = column;
  }
}

/** Parses a HUML document and returns its root value. Throws {@link HumlError} on invalid input. */
export function parse(text: string): unknown {
  return new Parser(text).document();
}

type Dict = Record<string, unknown>;

const BARE_KEY = /[A-Za-z][A-Za-z0-9_-]*/y;
const NUMBER =
  /[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9][0-9_]*(?:\.[0-9_]*)?(?:e[+-]?[0-9_]+)?)/y;
const ESCAPES: Record<string, string> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
  v: "\v",
};

class Parser {
  private readonly lines: string[];
  /** Current line index (0-based) and column index within it. */
  private row = 0;
  private col = 0;

  constructor(text: string) {
    this.lines = text.split("\n");
  }

  private get line(): string {
    return this.lines[this.row] ?? "";
  }

  private get eof(): boolean {
    return this.row >= this.lines.length;
  }

  private fail(message: string, col = this.col): never {
    if (this.eof) {
      this.row = this.lines.length - 1;
      col = this.line.length;
    }
    throw new HumlError(message, this.row + 1, [...this.line.slice(0, col)].length + 1);
  }

  private peek(s: string): boolean {
    return this.line.startsWith(s, this.col);
  }

  private nextLine(): void {
    this.row++;
    this.col = 0;
  }

  // ---------------------------------------------------------------- document

  document(): unknown {
    if (this.line.startsWith("%HUML")) {
      if (!this.line.startsWith("%HUML v0.2.0")) this.fail("unsupported HUML version directive");
      this.col = "%HUML v0.2.0".length;
      this.endLine();
    }
    this.skipBlank();
    if (this.eof) this.fail("empty document is undefined");
    if (this.line[0] === " ") this.fail("root value must not be indented");

    let value: unknown;
    if (this.peek("[]") || this.peek("{}")) {
      value = this.peek("[]") ? [] : {};
      this.col += 2;
      this.endLine();
    } else if (/^-( |$)/.test(this.line)) {
      value = this.listBody(0);
    } else if (this.keyAhead()) {
      const dict: Dict = {};
      if (!this.dictEntry(0, dict, true)) this.dictBody(0, dict);
      value = dict;
    } else if (this.peek('"""')) {
      value = this.multilineString(0);
    } else {
      value = this.scalar();
      if (this.line[this.col] === ",") {
        const list = [value];
        this.inlineRest(() => list.push(this.scalar()));
        value = list;
      } else {
        this.endLine();
      }
    }
    this.skipBlank();
    if (!this.eof) this.fail("unexpected content after the root value");
    return value;
  }

  // ------------------------------------------------------------ line helpers

  /** Skips empty and comment-only lines, validating them. */
  private skipBlank(): void {
    while (!this.eof) {
      const line = this.line;
      const indent = indentOf(line);
      if (indent === line.length) {
        if (line.length > 0) this.fail("trailing spaces are not allowed");
      } else if (line[indent] === "#") {
        this.col = indent;
        this.endLine();
        continue;
      } else {
        return;
      }
      this.nextLine();
    }
  }

  /** Validates the rest of the current line (optional comment, no trailing spaces) and moves on. */
  private endLine(): void {
    const line = this.line;
    let i = this.col;
    while (line[i] === " ") i++;
    if (i === line.length) {
      if (i > this.col) this.fail("trailing spaces are not allowed");
    } else if (line[i] === "#") {
      if (i === this.col && indentOf(line) !== i) {
        this.fail("a comment must be preceded by a space", i);
      }
      if (i + 1 < line.length && line[i + 1] !== " ") {
        this.fail("'#' must be followed by a space", i + 1);
      }
      if (line.endsWith(" ")) this.fail("trailing spaces are not allowed", line.trimEnd().length);
    } else if (line[i] === "," && i > this.col) {
      this.fail("no space allowed before a comma", this.col);
    } else {
      this.fail(`unexpected content ${JSON.stringify(line.slice(i))}`, i);
    }
    this.nextLine();
  }

  /** Consumes exactly one space. */
  private space(after: string): void {
    if (this.line[this.col] !== " ") this.fail(`expected a space after ${after}`);
    this.col++;
    if (this.line[this.col] === " ") this.fail(`expected a single space after ${after}`);
  }

  /** Whether the current position holds `key:` (without consuming it). */
  private keyAhead(): boolean {
    const start = this.col;
    try {
      this.key();
      return this.line[this.col] === ":";
    } catch {
      return false;
    } finally {
      this.col = start;
    }
  }

  // ------------------------------------------------------------ collections

  /** Parses `key: value` lines at exactly `indent`, stopping at a dedent. */
  private dictBody(indent: number, dict: Dict): Dict {
    while (this.blockLine(indent)) this.dictEntry(indent, dict, false);
    return dict;
  }

  /** Parses `- item` lines at exactly `indent`, stopping at a dedent. */
  private listBody(indent: number): unknown[] {
    const list: unknown[] = [];
    while (this.blockLine(indent)) {
      if (!this.peek("-")) this.fail("expected a list item '- '");
      this.col++;
      this.space("'-'");
      if (this.peek("::")) {
        this.col += 2;
        list.push(this.vector(indent));
      } else {
        list.push(this.lineValue(indent));
      }
    }
    return list;
  }

  /** Moves to the next content line; true if it belongs to a block at `indent`. */
  private blockLine(indent: number): boolean {
    this.skipBlank();
    if (this.eof) return false;
    const actual = indentOf(this.line);
    if (actual < indent) return false;
    if (actual !== indent) {
      this.fail(`bad indentation: expected ${indent} spaces, got ${actual}`, 0);
    }
    this.col = indent;
    return true;
  }

  /**
   * Parses one `key: scalar` or `key:: vector` entry. With `allowInline` (the
   * root's first line) a following `, key: value` turns it into an inline dict;
   * returns true in that case.
   */
  private dictEntry(indent: number, dict: Dict, allowInline: boolean): boolean {
    const keyCol = this.col;
    const key = this.key();
    if (Object.hasOwn(dict, key)) this.fail(`duplicate key '${key}'`, keyCol);
    if (this.line[this.col] !== ":") this.fail("expected ':' or '::' after key");
    this.col++;
    if (this.peek(":")) {
      this.col++;
      set(dict, key, this.vector(indent));
      return false;
    }
    this.space("':'");
    if (this.peek('"""')) {
      set(dict, key, this.multilineString(indent));
      return false;
    }
    set(dict, key, this.scalar());
    if (!allowInline || this.line[this.col] !== ",") {
      this.endLine();
      return false;
    }
    this.inlineRest(() => this.inlineEntry(dict));
    return true;
  }

  /** Parses what follows `::`: an inline vector, `[]`/`{}`, or an indented block. */
  private vector(indent: number): unknown {
    const rest = this.line.slice(this.col);
    if (rest === "" || /^ *#/.test(rest)) {
      this.endLine();
      this.skipBlank();
      const child = this.eof ? -1 : indentOf(this.line);
      if (child <= indent) this.fail("empty multi-line vector after '::' (use [] or {})", 0);
      if (child !== indent + 2) {
        this.fail(`bad indentation: expected ${indent + 2} spaces, got ${child}`, 0);
      }
      this.col = child;
      return this.peek("-") ? this.listBody(child) : this.dictBody(child, {});
    }
    this.space("'::'");
    if (this.peek("[]") || this.peek("{}")) {
      const empty = this.peek("[]") ? [] : {};
      this.col += 2;
      this.endLine();
      return empty;
    }
    if (this.keyAhead()) {
      const dict: Dict = {};
      this.inlineEntry(dict);
      this.inlineRest(() => this.inlineEntry(dict));
      return dict;
    }
    const list = [this.scalar()];
    this.inlineRest(() => list.push(this.scalar()));
    return list;
  }

  /** Parses `, item` repetitions until the end of the line, then ends the line. */
  private inlineRest(item: () => void): void {
    while (this.line[this.col] === ",") {
      this.col++;
      this.space("','");
      item();
    }
    this.endLine();
  }

  private inlineEntry(dict: Dict): void {
    const keyCol = this.col;
    const key = this.key();
    if (Object.hasOwn(dict, key)) this.fail(`duplicate key '${key}'`, keyCol);
    if (this.line[this.col] !== ":") this.fail("expected ':' after key");
    this.col++;
    if (this.peek(":")) this.fail("vectors are not allowed in inline dicts");
    this.space("':'");
    set(dict, key, this.scalar());
  }

  // ---------------------------------------------------------------- scalars

  private key(): string {
    if (this.peek('"')) return this.string();
    BARE_KEY.lastIndex = this.col;
    const m = BARE_KEY.exec(this.line);
    if (!m) this.fail("expected a key");
    this.col += m[0].length;
    return m[0];
  }

  /** A scalar or multi-line string that ends the current line. */
  private lineValue(indent: number): unknown {
    if (this.peek('"""')) return this.multilineString(indent);
    const value = this.scalar();
    this.endLine();
    return value;
  }

  private scalar(): unknown {
    const line = this.line;
    const c = line[this.col];
    if (c === undefined) this.fail("expected a value");
    if (c === '"') return this.string();
    for (const [word, value] of KEYWORDS) {
      if (
        line.startsWith(word, this.col) && !/[A-Za-z0-9_]/.test(line[this.col + word.length] ?? "")
      ) {
        this.col += word.length;
        return value;
      }
    }
    NUMBER.lastIndex = this.col;
    const m = NUMBER.exec(line);
    if (!m) {
      this.fail(`unexpected ${JSON.stringify(token(line, this.col))} (strings must be quoted)`);
    }
    if (/[A-Za-z0-9_.]/.test(line[this.col + m[0].length] ?? "")) {
      this.fail(`invalid number ${JSON.stringify(token(line, this.col))}`);
    }
    this.col += m[0].length;
    const text = m[0].replaceAll("_", "");
    const sign = text[0] === "-" ? -1 : 1;
    const body = text.replace(/^[+-]/, "");
    const value = /^0[xob]/.test(body) ? sign * Number(body) : Number(text);
    if (Number.isNaN(value)) this.fail(`invalid number ${JSON.stringify(m[0])}`);
    return value;
  }

  private string(): string {
    const line = this.line;
    let out = "";
    let i = this.col + 1;
    while (i < line.length) {
      const c = line[i];
      if (c === '"') {
        this.col = i + 1;
        return out;
      }
      if (c === "\\") {
        const e = line[i + 1];
        if (e === undefined) break;
        const decoded = ESCAPES[e];
        if (decoded === undefined) this.fail(`invalid escape sequence '\\${e}'`, i);
        out += decoded;
        i += 2;
      } else {
        out += c;
        i++;
      }
    }
    return this.fail("unclosed string");
  }

  /** Parses a `"""` block; content is indented `indent + 2`, the closing `"""` at `indent`. */
  private multilineString(indent: number): string {
    const startRow = this.row;
    const startCol = this.col;
    this.col += 3;
    this.endLine();
    const content: string[] = [];
    const strip = " ".repeat(indent + 2);
    for (; !this.eof; this.row++) {
      const line = this.line;
      const lineIndent = indentOf(line);
      if (line.startsWith('"""', lineIndent)) {
        if (lineIndent !== indent) {
          this.fail(`closing '"""' must be indented ${indent} spaces like its key`, lineIndent);
        }
        this.col = indent + 3;
        this.endLine();
        return content.join("\n");
      }
      content.push(line.startsWith(strip) ? line.slice(strip.length) : line);
    }
    this.row = startRow;
    return this.fail("unclosed multi-line string", startCol);
  }
}

const KEYWORDS: [string, unknown][] = [
  ["true", true],
  ["false", false],
  ["null", null],
  ["nan", NaN],
  ["inf", Infinity],
  ["+inf", Infinity],
  ["-inf", -Infinity],
];

/** The text from `col` up to the next space or comma, for error messages. */
function token(line: string, col: number): string {
  return line.slice(col).split(/[ ,]/)[0];
}

function indentOf(line: string): number {
  let i = 0;
  while (line[i] === " ") i++;
  return i;
}

/** Own-property assignment that is safe for keys like `__proto__`. */
function set(dict: Dict, key: string, value: unknown): void {
  Object.defineProperty(dict, key, { value, enumerable: true, writable: true, configurable: true });
}
