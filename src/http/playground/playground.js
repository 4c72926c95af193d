"use strict";
const $ = (id) => document.getElementById(id);
const editor = $("editor"), backdrop = $("backdrop"), list = $("completions");
let db = { schemas: [], wellknown: [] };
const rels = new Map(); // name and schema.name -> relation (with .schema)

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}

// ---- schema browser -------------------------------------------------------------------------
async function loadSchema() {
  const res = await fetch("/svc/database.json", { headers: { accept: "application/json" } });
  const body = await res.json();
  if (!res.ok) {
    showError(body, null);
    return;
  }
  db = body;
  rels.clear();
  for (const s of db.schemas) {
    for (const r of s.relations) {
      r.schema = s.name;
      if (!rels.has(r.name)) rels.set(r.name, r);
      rels.set(s.name + "." + r.name, r);
    }
  }
  renderRelations();
  const wk = $("wellknown");
  wk.replaceChildren();
  for (const w of db.wellknown || []) {
    const params = Object.keys(w.params || {});
    wk.append(el(
      "li",
      {},
      el("a", {
        href: "#",
        onclick: (e) => {
          e.preventDefault();
          useWellknown(w);
        },
      }, w.name),
      params.length ? " (" + params.join(", ") + ")" : "",
    ));
  }
  if (!(db.wellknown || []).length) wk.append(el("li", { class: "muted" }, "none"));
}

function renderRelations() {
  const f = $("filter").value.trim().toLowerCase();
  const box = $("relations");
  box.replaceChildren();
  if (!db.schemas.some((s) => s.relations.length)) {
    box.append(
      el(
        "p",
        { id: "empty-note", class: "muted" },
        "This role can read nothing: no relation is granted to it (the anonymous role, without a " +
          "session). Log in (top right), or grant it privileges in the database.",
      ),
    );
    return;
  }
  for (const s of db.schemas) {
    for (const r of s.relations) {
      const q = s.name === "public" ? r.name : s.name + "." + r.name;
      if (f && !q.toLowerCase().includes(f)) continue;
      const cols = el("ul");
      for (const c of r.columns) {
        cols.append(
          el(
            "li",
            {},
            c.name,
            " ",
            el("span", { class: "type" }, c.type + (c.nullable ? "" : " not null")),
          ),
        );
      }
      for (const fk of r.foreign_keys) {
        cols.append(
          el(
            "li",
            { class: "fk" },
            fk.columns.join(",") + " \u2192 " + fk.references.relation + "(" +
              fk.references.columns.join(",") + ")",
          ),
        );
      }
      const summary = el("summary", {}, q, " ", el("span", { class: "type" }, r.kind));
      summary.append(el("button", {
        class: "use",
        "data-relation": q,
        onclick: (e) => {
          e.preventDefault();
          useRelation(r);
        },
      }, "query"));
      box.append(el("details", { class: "rel", "data-relation": q }, summary, cols));
    }
  }
}

function setEditor(text) {
  editor.value = text;
  clearError();
  editor.focus();
  editor.setSelectionRange(text.length, text.length);
}
function useRelation(r) {
  const q = { relation: r.name };
  if (r.schema !== "public") q.schema = r.schema;
  q.limit = 10;
  setEditor(JSON.stringify(q, null, 2));
}
function useWellknown(w) {
  const params = {};
  for (const p of Object.keys(w.params || {})) params[p] = null;
  setEditor(JSON.stringify({ wellknown: w.name, params }, null, 2));
}

// ---- tolerant JSON scanner: containers, keys and the position of every value ---------------
// Works on incomplete text (what is being typed): unterminated strings and containers end at
// the end of the text.
function scan(text) {
  const root = { type: "root", start: 0, end: text.length, children: [], parent: null, key: null };
  const stack = [root];
  const strings = [];
  let expectKey = false, pendingKey = null, i = 0;
  const top = () => stack[stack.length - 1];
  while (i < text.length) {
    const ch = text[i];
    if (ch === '"') {
      let j = i + 1, closed = false;
      while (j < text.length) {
        if (text[j] === "\\") {
          j += 2;
          continue;
        }
        if (text[j] === '"') {
          closed = true;
          break;
        }
        j++;
      }
      let value = text.slice(i + 1, Math.min(j, text.length));
      try {
        value = JSON.parse('"' + value + '"');
      } catch { /* partial escape */ }
      const t = top();
      const isKey = t.type === "object" && expectKey;
      const s = {
        start: i,
        end: closed ? j + 1 : text.length,
        closed,
        value,
        isKey,
        container: t,
        key: isKey ? null : (t.type === "object" ? pendingKey : null),
      };
      strings.push(s);
      if (isKey) {
        pendingKey = value;
        expectKey = false;
      } else if (t.type === "object" && pendingKey !== null) t.values.set(pendingKey, s);
      i = s.end;
      continue;
    }
    if (ch === "{" || ch === "[") {
      const t = top();
      const c = {
        type: ch === "{" ? "object" : "array",
        start: i,
        end: text.length,
        parent: t,
        key: t.type === "object" ? pendingKey : null,
        values: new Map(),
        children: [],
      };
      if (t.type === "object" && pendingKey !== null) t.values.set(pendingKey, c);
      (t.children || (t.children = [])).push(c);
      stack.push(c);
      expectKey = ch === "{";
      pendingKey = null;
    } else if (ch === "}" || ch === "]") {
      if (stack.length > 1) {
        top().end = i + 1;
        stack.pop();
      }
      expectKey = false;
      pendingKey = top().type === "object" ? "\u0000done" : null;
    } else if (ch === ",") {
      expectKey = top().type === "object";
      pendingKey = null;
    }
    i++;
  }
  return { root, strings };
}

// Position of each JSON pointer's value in (valid) JSON text.
function pointerRanges(text) {
  const out = new Map();
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\r\n".includes(text[i])) i++;
  };
  const esc = (s) => s.replace(/~/g, "~0").replace(/\//g, "~1");
  function value(ptr) {
    ws();
    const start = i;
    const ch = text[i];
    if (ch === "{") {
      i++;
      ws();
      if (text[i] === "}") i++;
      else {for (;;) {
          ws();
          const ks = i;
          string();
          const key = JSON.parse(text.slice(ks, i));
          ws();
          i++; // colon
          value(ptr + "/" + esc(key));
          ws();
          if (text[i++] === "}") break;
        }}
    } else if (ch === "[") {
      i++;
      ws();
      if (text[i] === "]") i++;
      else {for (let n = 0;; n++) {
          value(ptr + "/" + n);
          ws();
          if (text[i++] === "]") break;
        }}
    } else if (ch === '"') string();
    else while (i < text.length && !",]} \t\r\n".includes(text[i])) i++;
    out.set(ptr, [start, i]);
  }
  function string() {
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    i++;
  }
  try {
    value("");
  } catch { /* invalid text: what was found so far */ }
  return out;
}

// ---- completion ------------------------------------------------------------------------------
const RELATION_KEYS = [
  "relation",
  "schema",
  "where",
  "join",
  "select",
  "order_by",
  "limit",
  "offset",
  "alias",
  "function",
  "arguments",
  "distinct_on",
];

function relationOf(container) {
  for (let c = container; c; c = c.parent) {
    if (c.type === "object" && c.values && c.values.has("relation")) {
      const v = c.values.get("relation");
      const schema = c.values.get("schema");
      const name = v && v.value;
      return rels.get(schema && schema.value ? schema.value + "." + name : name) || null;
    }
  }
  return null;
}

function joinCandidates(r) {
  const out = [];
  const qual = (x) => (x.schema === "public" ? {} : { schema: x.schema });
  for (const s of db.schemas) {
    for (const c of s.relations) {
      for (const fk of c.foreign_keys) {
        if (fk.references.relation !== r.name || fk.references.schema !== r.schema) continue;
        const on = {};
        fk.columns.forEach((col, k) => (on[col] = fk.references.columns[k]));
        out.push({
          label: c.name,
          detail: "array: " + c.name + " references " + r.name,
          snippet: { relation: c.name, ...qual(c), on },
        });
      }
    }
  }
  for (const fk of r.foreign_keys) {
    const t = rels.get(fk.references.schema + "." + fk.references.relation);
    if (!t) continue;
    const on = {};
    fk.columns.forEach((col, k) => (on[fk.references.columns[k]] = col));
    out.push({
      label: t.name,
      detail: "object: " + r.name + " references " + t.name,
      snippet: { relation: t.name, ...qual(t), on },
    });
  }
  return out;
}

// What to offer at the cursor: { from, to, items: [{label, detail, insert}] } or null.
function completionsAt(text, pos) {
  const { strings } = scan(text.slice(0, pos) + text.slice(pos));
  const s = strings.find((x) => x.start < pos && (pos < x.end || (!x.closed && pos === x.end)));
  if (!s) return null;
  const prefix = text.slice(s.start + 1, pos);
  const replaceTo = s.closed ? s.end : pos;
  const c = s.container;
  let items = [];
  if (s.isKey) {
    if (c.key === "join" && c.parent) {
      const parentRel = relationOf(c.parent);
      if (parentRel) {
        items = joinCandidates(parentRel).map((j) => ({
          label: j.label,
          detail: j.detail,
          insert: JSON.stringify(j.label) + ": " + JSON.stringify(j.snippet),
        }));
      }
    } else if (c.key === "on" && c.parent) {
      const joined = relationOf(c.parent);
      items = joined
        ? joined.columns.map((col) => ({
          label: col.name,
          detail: joined.name + " column",
          insert: JSON.stringify(col.name),
        }))
        : [];
    } else {
      items = RELATION_KEYS.map((k) => ({
        label: k,
        detail: "Relation field",
        insert: JSON.stringify(k),
      }));
    }
  } else if (s.key === "relation") {
    items = [];
    for (const sc of db.schemas) {
      for (const r of sc.relations) {
        items.push({
          label: r.name,
          detail: sc.name + " " + r.kind,
          insert: JSON.stringify(r.name),
        });
      }
    }
  } else if (c.type === "object" && c.key === "on") {
    const parentRel = c.parent && c.parent.parent && c.parent.parent.parent &&
      relationOf(c.parent.parent.parent);
    items = parentRel
      ? parentRel.columns.map((col) => ({
        label: col.name,
        detail: parentRel.name + " column",
        insert: JSON.stringify(col.name),
      }))
      : [];
  } else {
    const r = relationOf(c);
    if (r) {
      items = r.columns.map((col) => ({
        label: col.name,
        detail: col.type,
        insert: JSON.stringify(col.name),
      }));
      for (const f of r.computed_fields || []) {
        items.push({ label: f.name, detail: "computed " + f.type, insert: JSON.stringify(f.name) });
      }
    }
  }
  const p = prefix.toLowerCase();
  items = items.filter((x) => x.label.toLowerCase().startsWith(p));
  if (!items.length) return null;
  // Items replace the whole string token (quotes included); a join snippet adds the key's value.
  return { from: s.start, to: replaceTo, items };
}

let active = null; // { from, to, items, index }
function openCompletion(force) {
  const pos = editor.selectionStart;
  const found = completionsAt(editor.value, pos);
  if (
    !found ||
    (!force && found.items.length === 1 &&
      JSON.stringify(found.items[0].label) === editor.value.slice(found.from, found.to))
  ) {
    closeCompletion();
    return;
  }
  active = { ...found, index: 0 };
  list.replaceChildren(...found.items.map((x, k) => {
    const li = el(
      "li",
      { role: "option", "data-label": x.label },
      x.label,
      el("span", { class: "muted" }, x.detail || ""),
    );
    li.addEventListener("mousedown", (e) => {
      e.preventDefault();
      active.index = k;
      accept();
    });
    return li;
  }));
  list.hidden = false;
  highlightActive();
}
function highlightActive() {
  [...list.children].forEach((li, k) => li.classList.toggle("active", k === active.index));
  const li = list.children[active.index];
  if (li) li.scrollIntoView({ block: "nearest" });
}
function closeCompletion() {
  active = null;
  list.hidden = true;
}
function accept() {
  const x = active.items[active.index];
  const v = editor.value;
  editor.value = v.slice(0, active.from) + x.insert + v.slice(active.to);
  const at = active.from + x.insert.length;
  editor.setSelectionRange(at, at);
  closeCompletion();
  renderBackdrop(null);
}

editor.addEventListener("keydown", (e) => {
  if ((e.ctrlKey || e.metaKey) && e.key === "Enter") {
    e.preventDefault();
    closeCompletion();
    run();
    return;
  }
  if (e.ctrlKey && e.key === " ") {
    e.preventDefault();
    openCompletion(true);
    return;
  }
  if (!active) return;
  if (e.key === "ArrowDown") {
    e.preventDefault();
    active.index = (active.index + 1) % active.items.length;
    highlightActive();
  } else if (e.key === "ArrowUp") {
    e.preventDefault();
    active.index = (active.index + active.items.length - 1) % active.items.length;
    highlightActive();
  } else if (e.key === "Enter" || e.key === "Tab") {
    e.preventDefault();
    accept();
  } else if (e.key === "Escape") {
    e.preventDefault();
    closeCompletion();
  }
});
editor.addEventListener("input", (e) => {
  clearError();
  if (e.inputType && e.inputType.startsWith("insert")) openCompletion(false);
  else closeCompletion();
});
editor.addEventListener("blur", () =>
  setTimeout(() => {
    if (document.activeElement !== editor) closeCompletion();
  }, 150));
editor.addEventListener("scroll", () => {
  backdrop.scrollTop = editor.scrollTop;
});

// ---- running ---------------------------------------------------------------------------------
function flags() {
  return {
    sql: $("opt-sql").checked,
    query_plan: $("opt-plan").checked,
    count: $("opt-count").checked,
  };
}
function requestBody(q) {
  const f = flags();
  const wanted = Object.entries(f).filter(([, v]) => v);
  const isComplex = q && typeof q === "object" && !Array.isArray(q) && "query" in q;
  if (!wanted.length || Array.isArray(q)) return { body: q, prefix: "" };
  if (isComplex) return { body: { ...q, ...Object.fromEntries(wanted) }, prefix: "" };
  return { body: { query: q, ...Object.fromEntries(wanted) }, prefix: "/query" };
}

async function run() {
  clearError();
  let q;
  try {
    q = JSON.parse(editor.value);
  } catch (e) {
    const m = /position (\d+)/.exec(e.message);
    const at = m ? Number(m[1]) : editor.value.length;
    clearResult();
    showError({ code: "JSON", message: e.message }, null, [
      at,
      Math.min(at + 1, editor.value.length),
    ]);
    return;
  }
  updateGet(q);
  const { body, prefix } = requestBody(q);
  $("status").textContent = "running\u2026";
  const t0 = performance.now();
  const res = await fetch("/svc", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const ms = Math.round(performance.now() - t0);
  clearResult();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = text;
  }
  $("status").textContent = res.status + " in " + ms + " ms";
  if (!res.ok) {
    let ptr = data && data.details && typeof data.details.pointer === "string"
      ? data.details.pointer
      : null;
    if (ptr !== null && prefix && ptr.startsWith(prefix)) ptr = ptr.slice(prefix.length);
    showError(data, ptr);
    return;
  }
  const envelope = body !== q || (q && typeof q === "object" && !Array.isArray(q) && "query" in q);
  const result = envelope ? data.result : data;
  $("tab-json").textContent = JSON.stringify(data, null, 2);
  $("tab-table").replaceChildren(tableOf(result));
  if (envelope && data.count !== undefined) {
    $("tab-table").prepend(el("p", { class: "muted" }, "count: " + data.count));
  }
  const f = flags();
  $("tab-sql").textContent = !f.sql
    ? "Tick \u201csql\u201d and run to see the SQL."
    : (data.sql && data.sql.length
      ? data.sql.map((s) => "-- path: /" + (s.path || []).join("/") + "\n" + s.select).join("\n\n")
      : "The server does not show SQL (pg.query.allow_sql is off).");
  $("tab-plan").textContent = !f.query_plan
    ? "Tick \u201cquery_plan\u201d and run to see the plan."
    : (data.query_plan && data.query_plan.length
      ? JSON.stringify(data.query_plan, null, 2)
      : "The server does not show plans (pg.query.allow_query_plan is off).");
}

/** Empties every result tab, so an error never leaves an earlier result on screen. */
function clearResult() {
  $("tab-table").replaceChildren();
  for (const t of ["tab-json", "tab-sql", "tab-plan"]) $(t).textContent = "";
}

function tableOf(v) {
  if (Array.isArray(v) && v.every((r) => r && typeof r === "object" && !Array.isArray(r))) {
    if (!v.length) return el("p", { class: "muted" }, "no rows");
    const cols = [];
    for (const r of v) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
    const t = el(
      "table",
      { class: "rows" },
      el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", {}, c)))),
    );
    const tb = el("tbody");
    for (const r of v) tb.append(el("tr", {}, ...cols.map((c) => cell(r[c]))));
    t.append(tb);
    return el(
      "div",
      {},
      el("p", { class: "muted" }, v.length + " row" + (v.length === 1 ? "" : "s")),
      t,
    );
  }
  if (v && typeof v === "object" && !Array.isArray(v)) return tableOf([v]);
  return el("pre", {}, JSON.stringify(v, null, 2));
}
function cell(v) {
  if (v === null || v === undefined) return el("td", { class: "null" }, "null");
  if (
    Array.isArray(v) && v.length && v.every((r) => r && typeof r === "object" && !Array.isArray(r))
  ) {
    return el(
      "td",
      {},
      el(
        "details",
        {},
        el("summary", {}, v.length + " row" + (v.length === 1 ? "" : "s")),
        tableOf(v),
      ),
    );
  }
  if (typeof v === "object" && !Array.isArray(v)) {
    return el("td", {}, el("details", {}, el("summary", {}, "{\u2026}"), tableOf(v)));
  }
  return el("td", {}, typeof v === "string" ? v : JSON.stringify(v));
}

// ---- errors and the pointer highlight ---------------------------------------------------------
function renderBackdrop(range) {
  const v = editor.value;
  backdrop.replaceChildren();
  if (!range) {
    backdrop.textContent = v + "\n";
    return;
  }
  const [a, b] = range;
  backdrop.append(
    v.slice(0, a),
    el("mark", { id: "error-mark" }, v.slice(a, b) || " "),
    v.slice(b) + "\n",
  );
  backdrop.scrollTop = editor.scrollTop;
}
function showError(body, pointer, range) {
  $("error").hidden = false;
  $("error-code").textContent = (body && body.code) || "ERROR";
  $("error-message").textContent = (body && body.message) || String(body);
  $("error-pointer").textContent = pointer === null || pointer === undefined
    ? "(none)"
    : JSON.stringify(pointer);
  if (!range && pointer !== null && pointer !== undefined) {
    const ranges = pointerRanges(editor.value);
    let p = pointer;
    while (!ranges.has(p) && p) p = p.slice(0, p.lastIndexOf("/"));
    range = ranges.get(p) || null;
  }
  renderBackdrop(range || null);
  if (range) {
    editor.focus();
    editor.setSelectionRange(range[0], range[1]);
  }
}
function clearError() {
  $("error").hidden = true;
  renderBackdrop(null);
}

// ---- GET form and curl ------------------------------------------------------------------------
const OPS = {
  "=": "eq",
  "<>": "neq",
  "<": "lt",
  "<=": "lte",
  ">": "gt",
  ">=": "gte",
  like: "like",
  ilike: "ilike",
  in: "in",
  not_in: "not_in",
  between: "between",
  is_null: "is_null",
  is_not_null: "is_not_null",
  and: "and",
  or: "or",
  not: "not",
  "@>": "contains",
  "<@": "contained",
  "&&": "overlaps",
  fts: "fts",
};
function expr(e) {
  if (typeof e === "string") return e;
  if (typeof e === "number" || typeof e === "boolean" || e === null) return String(e);
  if (Array.isArray(e) && e.length === 1 && typeof e[0] === "string") {
    return "'" + e[0].replace(/'/g, "''") + "'";
  }
  if (Array.isArray(e) && OPS[e[0]]) return OPS[e[0]] + "(" + e.slice(1).map(expr).join(",") + ")";
  throw new Error("the expression " + JSON.stringify(e) + " has no GET form");
}
function getParams(q, prefix, out) {
  for (const [k, v] of Object.entries(q)) {
    const key = prefix + k;
    if (["relation", "schema", "function", "alias"].includes(k)) out.push([key, String(v)]);
    else if (k === "limit" || k === "offset") out.push([key, String(v)]);
    else if (k === "where") out.push([key, expr(v)]);
    else if (k === "select") {
      if (typeof v === "string") out.push([key, v]);
      else if (Array.isArray(v) && v.every((x) => typeof x === "string")) {
        out.push([key, v.join(",")]);
      } else throw new Error("this select has no GET form");
    } else if (k === "order_by" || k === "distinct_on") {
      const terms = (Array.isArray(v) ? v : [v]).map((t) =>
        typeof t === "string"
          ? t
          : Array.isArray(t) && t[0] === "desc" && typeof t[1] === "string" && t.length === 2
          ? "-" + t[1]
          : Array.isArray(t) && t[0] === "asc" && typeof t[1] === "string" && t.length === 2
          ? t[1]
          : (() => {
            throw new Error("this " + k + " has no GET form");
          })()
      );
      out.push([key, terms.join(",")]);
    } else if (k === "join") {
      for (const [alias, j] of Object.entries(v)) getParams(j, key + "." + alias + ".", out);
    } else if (k === "on") {
      for (const [c, p] of Object.entries(v)) out.push([key + "." + c, String(p)]);
    } else throw new Error("'" + k + "' has no GET form");
  }
}
function updateGet(q) {
  const link = $("get-link"), curl = $("curl");
  const wanted = Object.values(flags()).some(Boolean);
  let text;
  try {
    if (!q || typeof q !== "object" || Array.isArray(q) || "query" in q) {
      throw new Error("only a plain read has a GET form");
    }
    const out = [];
    if ("wellknown" in q) {
      out.push(["wellknown", q.wellknown]);
      for (const [k, v] of Object.entries(q.params || {})) {
        out.push(["params." + k, typeof v === "string" ? v : JSON.stringify(v)]);
      }
    } else getParams(q, "", out);
    const url = location.origin + "/svc?" +
      out.map(([k, v]) => encodeURIComponent(k) + "=" + encodeURIComponent(v)).join("&");
    link.textContent = url;
    link.href = url;
    text = "curl -s '" + url.replace(/'/g, "'\\''") + "'" +
      (wanted ? "\n# (GET has no sql/query_plan/count flags; the POST form below has)" : "");
  } catch (e) {
    link.textContent = "No GET form: " + e.message;
    link.removeAttribute("href");
    text = "";
  }
  const body = JSON.stringify(requestBody(q).body);
  text += (text ? "\n\n" : "") + "curl -s " + location.origin +
    "/svc -H 'content-type: application/json' -d '" + body.replace(/'/g, "'\\''") + "'";
  curl.textContent = text;
}

// ---- wiring -----------------------------------------------------------------------------------
for (const b of document.querySelectorAll("#tabs button")) {
  b.addEventListener("click", () => {
    for (const x of document.querySelectorAll("#tabs button")) {
      x.classList.toggle("active", x === b);
    }
    for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== "tab-" + b.dataset.tab;
    if (b.dataset.tab === "get") {
      try {
        updateGet(JSON.parse(editor.value));
      } catch { /* shown on run */ }
    }
  });
}
$("run").addEventListener("click", run);

// ---- session: log in through the application's own login route ---------------------------
async function postJson(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  let data = null;
  try {
    data = await res.json();
  } catch { /* no JSON body */ }
  return { res, data };
}
$("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const { res, data } = await postJson($("login-path").value, $("login-body").value);
  $("login-status").textContent = res.ok
    ? "logged in"
    : "login failed: " + res.status + (data && data.message ? " " + data.message : "");
  if (res.ok) {
    $("login-box").open = false;
    clearResult();
    await loadSchema();
  }
});
$("logout-submit").addEventListener("click", async () => {
  const { res } = await postJson($("logout-path").value, "{}");
  $("login-status").textContent = res.ok ? "logged out" : "logout failed: " + res.status;
  clearResult();
  await loadSchema();
});
$("filter").addEventListener("input", renderRelations);
$("copy-curl").addEventListener(
  "click",
  () => navigator.clipboard && navigator.clipboard.writeText($("curl").textContent),
);
setEditor(JSON.stringify({ relation: "", limit: 10 }, null, 2));
loadSchema().then(() => {
  document.body.dataset.ready = "true";
});
