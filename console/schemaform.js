// A form generated from a JSON Schema (the playground's input): objects,
// nested objects, arrays, enums, consts, anyOf/oneOf unions as a selector,
// optional properties toggled. A part the form cannot draw (or a value
// that does not fit its schema) becomes a small JSON field, so no value
// typed in the raw editor is ever lost.

import { el, pretty } from "./dom.js";

/** maxDepth bounds nesting (recursive schemas): deeper parts are JSON fields. */
const maxDepth = 12;

let uid = 0;
const nextId = () => `sf${++uid}`;

/** pointer follows a local JSON pointer ("#/$defs/x") in root, or returns undefined. */
function pointer(root, ref) {
  if (!ref.startsWith("#")) return undefined;
  let cur = root;
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const k = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (cur === null || typeof cur !== "object" || !(k in cur)) return undefined;
    cur = cur[k];
  }
  return cur;
}

/** resolve replaces local $refs of s by their targets (siblings kept); an unresolvable ref gives undefined. */
function resolve(root, s) {
  for (let n = 0; s && typeof s === "object" && typeof s.$ref === "string"; n++) {
    const target = pointer(root, s.$ref);
    if (n > 16 || !target || typeof target !== "object") return undefined;
    const { $ref, ...rest } = s;
    s = { ...target, ...rest };
  }
  return s;
}

/** variants lists a union's alternatives: anyOf/oneOf, or one schema per listed type. */
function variants(s) {
  const { anyOf, oneOf, ...rest } = s;
  if (Array.isArray(anyOf ?? oneOf)) return (anyOf ?? oneOf).map((v) => (typeof v === "object" ? { ...rest, ...v } : v));
  return s.type.map((t) => ({ ...rest, type: t }));
}

/** kind is how the form draws s: a scalar input, object, array, enum, const, union, or json. */
function kind(s) {
  if (!s || typeof s !== "object" || Object.keys(s).length === 0) return "json";
  if (s.const !== undefined) return "const";
  if (Array.isArray(s.enum) && s.enum.length > 0) return "enum";
  if (Array.isArray(s.anyOf) || Array.isArray(s.oneOf)) return "union";
  if (Array.isArray(s.type)) return s.type.length === 1 ? kind({ ...s, type: s.type[0] }) : "union";
  const t = s.type ?? (s.properties ? "object" : s.items ? "array" : undefined);
  if (t === "object") return s.properties ? "object" : "json";
  if (t === "array") return s.items && !Array.isArray(s.items) && !s.prefixItems ? "array" : "json";
  return ["string", "number", "integer", "boolean", "null"].includes(t) ? t : "json";
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** fits reports whether value can be shown by the form drawn for s. */
function fits(root, s, value) {
  switch (kind(s)) {
    case "const": return same(value, s.const);
    case "enum": return s.enum.some((e) => same(e, value));
    case "union": return variants(s).some((v) => fits(root, resolve(root, v), value));
    case "string": return typeof value === "string";
    case "number": return typeof value === "number";
    case "integer": return Number.isInteger(value);
    case "boolean": return typeof value === "boolean";
    case "null": return value === null;
    case "object": return isObject(value) && (s.required ?? []).every((k) => k in value);
    case "array": return Array.isArray(value);
    default: return true;
  }
}

/** defaultFor is the value a new field of s starts with: its default, else an empty value of its kind. */
function defaultFor(root, s, depth = 0) {
  if (s && s.default !== undefined) return structuredClone(s.default);
  if (depth > maxDepth) return null;
  switch (kind(s)) {
    case "const": return structuredClone(s.const);
    case "enum": return structuredClone(s.enum[0]);
    case "union": return defaultFor(root, resolve(root, variants(s)[0]), depth + 1);
    case "string": return "";
    case "number": case "integer": return typeof s.minimum === "number" ? s.minimum : 0;
    case "boolean": return false;
    case "object": {
      const o = {};
      for (const k of s.required ?? []) {
        const ps = resolve(root, s.properties?.[k]);
        if (ps) o[k] = defaultFor(root, ps, depth + 1);
      }
      return o;
    }
    case "array": return [];
    default: return null;
  }
}

/** Form is a generated form: node to show, value() to read, set(v) to redraw from a value. */
export class Form {
  /** @param root the input JSON Schema; onChange gets the value after each edit in the form. */
  constructor(root, value, onChange) {
    this.root = root;
    this.onChange = onChange;
    this.node = el("div", { class: "schema-form" });
    this.node.addEventListener("input", () => this.notify());
    this.set(value);
  }

  /** set redraws the form from v (undefined = the schema's default). */
  set(v) {
    this.top = this.field(this.root, v === undefined ? defaultFor(this.root, this.root) : v, "input", 0, true);
    this.node.replaceChildren(this.top.node);
  }

  /** value is the form's current value. */
  value() { return this.top.get(); }

  notify() { this.onChange(this.value()); }

  /** field draws value with schema s under label; it returns {node, get}. */
  field(s, value, label, depth, top = false) {
    s = resolve(this.root, s);
    let k = kind(s);
    if (depth > maxDepth || (value !== undefined && !fits(this.root, s, value))) k = "json";
    const hint = s?.description ? el("small", { class: "hint" }, s.description) : null;
    switch (k) {
      case "object": return this.objectField(s, value ?? {}, label, depth, top, hint);
      case "array": return this.arrayField(s, value ?? [], label, depth, hint);
      case "union": return this.unionField(s, value, label, depth, hint);
      case "enum": {
        const id = nextId();
        const sel = el("select", { id }, s.enum.map((e, i) => el("option", { value: String(i), selected: same(e, value) }, typeof e === "string" ? e : JSON.stringify(e))));
        return { node: row(id, label, sel, hint), get: () => structuredClone(s.enum[Number(sel.value)]) };
      }
      case "const":
        return { node: el("div", { class: "row" }, el("span", { class: "label" }, label), el("code", {}, JSON.stringify(s.const)), hint), get: () => structuredClone(s.const) };
      case "string": {
        const id = nextId();
        const input = el("input", { id, type: "text", value: value ?? "", placeholder: s.format ?? s.pattern });
        return { node: row(id, label, input, hint), get: () => input.value };
      }
      case "number": case "integer": {
        const id = nextId();
        const input = el("input", { id, type: "number", step: k === "integer" ? "1" : "any", min: s.minimum, max: s.maximum, value: value === undefined ? "" : String(value) });
        return { node: row(id, label, input, hint), get: () => (input.value === "" ? undefined : Number(input.value)) };
      }
      case "boolean": {
        const id = nextId();
        const input = el("input", { id, type: "checkbox", checked: value === true });
        return { node: el("div", { class: "row check" }, input, el("label", { for: id }, label), hint), get: () => input.checked };
      }
      case "null":
        return { node: el("div", { class: "row" }, el("span", { class: "label" }, label), el("code", {}, "null")), get: () => null };
      default:
        return this.jsonField(value, label, hint);
    }
  }

  /** objectField draws each property: required ones always, optional ones behind a toggle; unknown keys of value stay as JSON. */
  objectField(s, value, label, depth, top, hint) {
    const box = el("fieldset", { class: top ? "object top" : "object" }, top ? null : el("legend", {}, label), hint);
    const required = new Set(s.required ?? []);
    const getters = [];
    for (const [key, ps] of Object.entries(s.properties)) {
      if (required.has(key)) {
        const f = this.field(ps, key in value ? value[key] : defaultFor(this.root, resolve(this.root, ps)), key, depth + 1);
        box.append(f.node);
        getters.push([key, () => f.get()]);
        continue;
      }
      const id = nextId();
      const toggle = el("input", { id, type: "checkbox", checked: key in value, class: "include" });
      const slot = el("div", { class: "slot" });
      let f = null;
      const fill = (v) => { f = this.field(ps, v, key, depth + 1); slot.replaceChildren(f.node); };
      if (key in value) fill(value[key]);
      toggle.addEventListener("change", () => {
        if (toggle.checked) fill(defaultFor(this.root, resolve(this.root, ps)));
        else { f = null; slot.replaceChildren(); }
        this.notify();
      });
      box.append(el("div", { class: "optional" }, el("label", { for: id, class: "toggle" }, toggle, ` include ${key} (optional)`), slot));
      getters.push([key, () => f?.get()]);
    }
    const extra = Object.fromEntries(Object.entries(value).filter(([k]) => !(k in s.properties)));
    let extraField = null;
    if (Object.keys(extra).length) {
      extraField = this.jsonField(extra, "other properties", el("small", { class: "hint" }, "not in the schema"));
      box.append(extraField.node);
    }
    return {
      node: box,
      get: () => {
        const o = {};
        for (const [k, g] of getters) {
          const v = g();
          if (v !== undefined) o[k] = v;
        }
        const more = extraField?.get();
        return isObject(more) ? { ...o, ...more } : o;
      },
    };
  }

  /** arrayField draws a list of item fields with add and remove buttons. */
  arrayField(s, value, label, depth, hint) {
    const items = resolve(this.root, s.items);
    const list = el("ol", { class: "items" });
    let entries = [];
    const add = (v) => {
      const f = this.field(items, v, `${label} item`, depth + 1);
      const li = el("li", {}, f.node, el("button", { type: "button", class: "small", onclick: () => {
        entries = entries.filter((e) => e !== f);
        li.remove();
        this.notify();
      } }, "Remove"));
      entries.push(f);
      list.append(li);
    };
    value.forEach(add);
    const more = el("button", { type: "button", class: "small", "aria-label": `Add an item to ${label}`, onclick: () => { add(defaultFor(this.root, items)); this.notify(); } }, "Add an item");
    return { node: el("fieldset", { class: "array" }, el("legend", {}, label, " (list)"), hint, list, more), get: () => entries.map((e) => e.get() ?? null) };
  }

  /** unionField draws a selector of the alternatives and the chosen one's field. */
  unionField(s, value, label, depth, hint) {
    const vs = variants(s).map((v) => resolve(this.root, v));
    let chosen = value === undefined ? 0 : Math.max(0, vs.findIndex((v) => fits(this.root, v, value)));
    const id = nextId();
    const sel = el("select", { id, class: "variant" }, vs.map((v, i) => el("option", { value: String(i), selected: i === chosen }, variantTitle(v, i))));
    const slot = el("div", { class: "slot" });
    let f = null;
    const fill = (v) => { f = this.field(vs[chosen], v, label, depth + 1); slot.replaceChildren(f.node); };
    fill(value === undefined ? defaultFor(this.root, vs[chosen]) : value);
    sel.addEventListener("change", () => { chosen = Number(sel.value); fill(defaultFor(this.root, vs[chosen])); this.notify(); });
    return { node: el("fieldset", { class: "union" }, el("legend", {}, label), hint, row(id, `${label}: one of`, sel), slot), get: () => f.get() };
  }

  /** jsonField is a small raw JSON editor for a part the form cannot draw; while it does not parse, the last valid value stands. */
  jsonField(value, label, hint) {
    const id = nextId();
    let last = value;
    const area = el("textarea", { id, class: "json small", rows: 3, spellcheck: "false", value: pretty(value) });
    area.addEventListener("input", () => {
      try {
        last = JSON.parse(area.value);
        area.classList.remove("invalid");
      } catch {
        area.classList.add("invalid");
      }
    });
    return { node: row(id, `${label} (JSON)`, area, hint), get: () => last };
  }
}

/** row is a labelled control. */
const row = (id, label, control, hint) => el("div", { class: "row" }, el("label", { for: id }, label), control, hint);

/** variantTitle names a union alternative for its selector. */
function variantTitle(v, i) {
  if (!v) return `option ${i + 1}`;
  if (v.title) return v.title;
  if (v.const !== undefined) return JSON.stringify(v.const);
  if (v.properties) return `{ ${Object.keys(v.properties).slice(0, 3).join(", ")}${Object.keys(v.properties).length > 3 ? ", …" : ""} }`;
  if (v.type) return [].concat(v.type).join(" | ");
  if (v.enum) return v.enum.map((e) => JSON.stringify(e)).join(" | ");
  return `option ${i + 1}`;
}

/** drawable reports whether the form can draw at least the top of schema (else the playground offers raw JSON alone). */
export const drawable = (schema) => !!schema && kind(resolve(schema, schema)) !== "json";
