// The built-in stand-in for "drizzle-orm" and "drizzle-orm/pg-core": both
// import paths resolve to it when a file is bundled (bundle.go), so svc
// auto-migrate evaluates src/schema.ts with it (no Node, no drizzle-kit) and
// user code that imports the schema sees the same tables. It implements the
// common subset of the table builders and only records what they describe:
// every table made by pgTable carries a hidden __svc_table() that returns a
// plain description (names, SQL types, defaults as SQL text, keys, foreign
// keys, indexes) for the Go side to read. This file is an expression whose
// value holds the exports; importing a name outside them fails to compile,
// naming what is supported.
(function () {
  "use strict";

  const ACTIONS = ["cascade", "restrict", "no action", "set null", "set default"];

  // Raw SQL: the result of sql`…` and sql.raw(…).
  class SQL {
    constructor(text) {
      this.text = text;
    }
  }

  function quoteIdent(name) {
    return '"' + String(name).replace(/"/g, '""') + '"';
  }

  function quoteLiteral(s) {
    return "'" + String(s).replace(/'/g, "''") + "'";
  }

  // render inlines a value into SQL text: SQL as is, a column as its quoted
  // name, a Date as its ISO text, objects and arrays as JSON text.
  function render(v) {
    if (v instanceof SQL) return v.text;
    if (v instanceof Column) return quoteIdent(v.columnName());
    if (v === null || v === undefined) return "NULL";
    if (typeof v === "number") {
      if (!isFinite(v)) throw new TypeError("cannot write " + v + " as SQL");
      return String(v);
    }
    if (typeof v === "bigint") return String(v);
    if (typeof v === "boolean") return v ? "true" : "false";
    if (typeof v === "string") return quoteLiteral(v);
    if (v instanceof Date) return quoteLiteral(v.toISOString());
    if (typeof v === "object") return quoteLiteral(JSON.stringify(v));
    throw new TypeError("cannot write a " + typeof v + " as SQL");
  }

  function sql(strings) {
    let text = strings[0];
    for (let i = 1; i < strings.length; i++) text += render(arguments[i]) + strings[i];
    return new SQL(text);
  }
  sql.raw = (text) => new SQL(String(text));

  // Column is a column builder; its chained modifiers return it.
  class Column {
    constructor(type, name) {
      this.sqlType = type;
      this.name = name;
      this.table = undefined; // set by pgTable
      this.key = undefined; // the property name in pgTable's columns
      this.isNotNull = false;
      this.isPrimaryKey = false;
      this.defaultSQL = null;
      this.uniqueSpec = null;
      this.reference = null;
    }
    columnName() {
      if (this.name === undefined) throw new TypeError("a column was used before pgTable named it");
      return this.name;
    }
    primaryKey() {
      this.isPrimaryKey = true;
      this.isNotNull = true;
      return this;
    }
    notNull() {
      this.isNotNull = true;
      return this;
    }
    default(value) {
      this.defaultSQL = render(value);
      return this;
    }
    defaultNow() {
      this.defaultSQL = "now()";
      return this;
    }
    defaultRandom() {
      if (this.sqlType !== "uuid") throw new TypeError("defaultRandom() is only for uuid columns");
      this.defaultSQL = "gen_random_uuid()";
      return this;
    }
    unique(name, config) {
      this.uniqueSpec = { name: name || "", nullsNotDistinct: !!(config && config.nulls === "not distinct") };
      return this;
    }
    references(ref, actions) {
      if (typeof ref !== "function") throw new TypeError("references(() => table.column): pass a function");
      this.reference = { ref, actions: checkActions(actions || {}) };
      return this;
    }
    // Type-level and runtime-only modifiers: no SQL.
    $type() {
      return this;
    }
    $defaultFn() {
      return this;
    }
    $default() {
      return this;
    }
    $onUpdateFn() {
      return this;
    }
    $onUpdate() {
      return this;
    }
    // Sort orders inside index(…).on(…).
    asc() {
      return new SQL(quoteIdent(this.columnName()) + " ASC");
    }
    desc() {
      return new SQL(quoteIdent(this.columnName()) + " DESC");
    }
  }

  function checkActions(a) {
    for (const k of ["onDelete", "onUpdate"]) {
      if (a[k] !== undefined && ACTIONS.indexOf(a[k]) < 0) {
        throw new TypeError(k + ": want one of " + ACTIONS.join(", ") + ", got " + JSON.stringify(a[k]));
      }
    }
    return { onDelete: a.onDelete || "no action", onUpdate: a.onUpdate || "no action" };
  }

  // columnArgs accepts (name, config), (config) and ().
  function columnArgs(a, b) {
    if (typeof a === "string") return [a, b || {}];
    return [undefined, a || {}];
  }

  function positiveInt(what, v) {
    if (typeof v !== "number" || v !== Math.floor(v) || v <= 0) {
      throw new TypeError(what + " must be a positive integer, got " + JSON.stringify(v));
    }
    return v;
  }

  function simple(type) {
    return function (a, b) {
      return new Column(type, columnArgs(a, b)[0]);
    };
  }

  function varchar(a, b) {
    const [name, c] = columnArgs(a, b);
    return new Column(c.length === undefined ? "varchar" : "varchar(" + positiveInt("varchar length", c.length) + ")", name);
  }

  function timestamp(a, b) {
    const [name, c] = columnArgs(a, b);
    const p = c.precision === undefined ? "" : "(" + c.precision + ")";
    if (c.precision !== undefined && (c.precision !== Math.floor(c.precision) || c.precision < 0 || c.precision > 6)) {
      throw new TypeError("timestamp precision must be an integer from 0 to 6");
    }
    return new Column("timestamp" + p + (c.withTimezone ? " with time zone" : " without time zone"), name);
  }

  function numeric(a, b) {
    const [name, c] = columnArgs(a, b);
    let type = "numeric";
    if (c.precision !== undefined) {
      type += "(" + positiveInt("numeric precision", c.precision);
      if (c.scale !== undefined) {
        if (c.scale !== Math.floor(c.scale) || c.scale < 0) throw new TypeError("numeric scale must be a non-negative integer");
        type += ", " + c.scale;
      }
      type += ")";
    } else if (c.scale !== undefined) {
      throw new TypeError("numeric scale needs a precision");
    }
    return new Column(type, name);
  }

  const columnBuilders = {
    serial: simple("serial"),
    bigserial: simple("bigserial"),
    smallint: simple("smallint"),
    integer: simple("integer"),
    bigint: simple("bigint"),
    text: simple("text"),
    varchar,
    boolean: simple("boolean"),
    timestamp,
    date: simple("date"),
    json: simple("json"),
    jsonb: simple("jsonb"),
    uuid: simple("uuid"),
    numeric,
    real: simple("real"),
    doublePrecision: simple("double precision"),
  };

  // Table extras (the third argument of pgTable).
  class IndexBuilder {
    constructor(name, unique) {
      this.kind = "index";
      this.name = name || "";
      this.unique = unique;
      this.method = "btree";
      this.columns = null;
      this.where_ = "";
    }
    on(...cols) {
      this.columns = cols;
      return this;
    }
    onOnly(...cols) {
      return this.on(...cols);
    }
    using(method, ...cols) {
      this.method = String(method);
      return this.on(...cols);
    }
    where(cond) {
      this.where_ = render(cond);
      return this;
    }
  }

  class UniqueBuilder {
    constructor(name) {
      this.kind = "unique";
      this.name = name || "";
      this.columns = null;
      this.nullsNotDistinct_ = false;
    }
    on(...cols) {
      this.columns = cols;
      return this;
    }
    nullsNotDistinct() {
      this.nullsNotDistinct_ = true;
      return this;
    }
  }

  class ForeignKeyBuilder {
    constructor(config) {
      if (!config || !Array.isArray(config.columns) || !Array.isArray(config.foreignColumns)) {
        throw new TypeError("foreignKey({ columns: [...], foreignColumns: [...] })");
      }
      this.kind = "foreignKey";
      this.name = config.name || "";
      this.columns = config.columns;
      this.foreignColumns = config.foreignColumns;
      this.actions = { onDelete: "no action", onUpdate: "no action" };
    }
    onDelete(action) {
      this.actions = checkActions({ onDelete: action, onUpdate: this.actions.onUpdate });
      return this;
    }
    onUpdate(action) {
      this.actions = checkActions({ onDelete: this.actions.onDelete, onUpdate: action });
      return this;
    }
  }

  function primaryKey(first, ...rest) {
    if (first instanceof Column) return { kind: "primaryKey", name: "", columns: [first, ...rest] };
    if (!first || !Array.isArray(first.columns)) throw new TypeError("primaryKey({ columns: [...] })");
    return { kind: "primaryKey", name: first.name || "", columns: first.columns };
  }

  function columnNames(tableName, what, cols) {
    if (!Array.isArray(cols) || cols.length === 0) throw new TypeError(tableName + ": " + what + " needs at least one column");
    return cols.map((c) => {
      if (!(c instanceof Column)) throw new TypeError(tableName + ": " + what + " takes columns of the table");
      if (c.table !== tableName) throw new TypeError(tableName + ": " + what + " uses column " + c.table + "." + c.name + " of another table");
      return c.name;
    });
  }

  function target(tableName, c) {
    if (!(c instanceof Column) || c.table === undefined) {
      throw new TypeError(tableName + ": a reference must name a column of a table made by pgTable");
    }
    return c;
  }

  // describe returns the plain description of a table; it resolves the
  // references and runs the extras callback, as drizzle does lazily.
  function describe(name, cols, table, extra) {
    const d = { name, columns: [], primaryKey: null, uniques: [], foreignKeys: [], indexes: [] };
    for (const c of cols) {
      d.columns.push({ name: c.name, type: c.sqlType, notNull: c.isNotNull, default: c.defaultSQL });
      if (c.isPrimaryKey) {
        if (d.primaryKey) throw new TypeError(name + ": several columns call primaryKey(); use primaryKey({ columns: [...] }) for a composite key");
        d.primaryKey = { name: "", columns: [c.name] };
      }
      if (c.uniqueSpec) d.uniques.push({ name: c.uniqueSpec.name, columns: [c.name], nullsNotDistinct: c.uniqueSpec.nullsNotDistinct });
      if (c.reference) {
        const t = target(name, c.reference.ref());
        d.foreignKeys.push({
          name: "", columns: [c.name], foreignTable: t.table, foreignColumns: [t.name],
          onDelete: c.reference.actions.onDelete, onUpdate: c.reference.actions.onUpdate,
        });
      }
    }
    let extras = extra ? extra(table) : [];
    if (extras && !Array.isArray(extras)) extras = Object.keys(extras).map((k) => extras[k]);
    for (const x of extras || []) {
      if (x instanceof IndexBuilder) {
        if (!x.columns) throw new TypeError(name + ": index " + JSON.stringify(x.name) + " needs .on(columns…)");
        if (x.columns.length === 0) throw new TypeError(name + ": index " + JSON.stringify(x.name) + " needs at least one column");
        d.indexes.push({
          name: x.name, unique: x.unique, method: x.method, where: x.where_,
          columns: x.columns.map(render), columnNames: x.columns.map((c) => (c instanceof Column ? c.name : "")),
        });
      } else if (x instanceof UniqueBuilder) {
        d.uniques.push({ name: x.name, columns: columnNames(name, "unique()", x.columns), nullsNotDistinct: x.nullsNotDistinct_ });
      } else if (x instanceof ForeignKeyBuilder) {
        const fcs = x.foreignColumns.map((c) => target(name, c));
        d.foreignKeys.push({
          name: x.name, columns: columnNames(name, "foreignKey()", x.columns),
          foreignTable: fcs.length ? fcs[0].table : "", foreignColumns: fcs.map((c) => c.name),
          onDelete: x.actions.onDelete, onUpdate: x.actions.onUpdate,
        });
      } else if (x && x.kind === "primaryKey") {
        if (d.primaryKey) throw new TypeError(name + ": a table has one primary key; remove primaryKey() from its columns");
        d.primaryKey = { name: x.name, columns: columnNames(name, "primaryKey()", x.columns) };
      } else {
        throw new TypeError(name + ": unsupported table extra; svc's drizzle-orm stand-in knows index(), uniqueIndex(), unique(), primaryKey() and foreignKey()");
      }
    }
    return d;
  }

  function pgTable(name, columns, extra) {
    if (typeof name !== "string" || name === "") throw new TypeError("pgTable(name, columns): name must be a non-empty string");
    if (typeof columns === "function") columns = columns(columnBuilders);
    if (!columns || typeof columns !== "object") throw new TypeError("pgTable(" + JSON.stringify(name) + ", columns): columns must be an object");
    if (extra !== undefined && typeof extra !== "function") throw new TypeError("pgTable(" + JSON.stringify(name) + ", columns, extra): extra must be a function of the table");
    const table = {};
    const cols = [];
    for (const key of Object.keys(columns)) {
      const c = columns[key];
      if (!(c instanceof Column)) throw new TypeError(name + "." + key + " is not a column builder");
      if (c.table !== undefined) throw new TypeError(name + "." + key + " reuses a column of table " + c.table);
      c.table = name;
      c.key = key;
      if (c.name === undefined) c.name = key;
      table[key] = c;
      cols.push(c);
    }
    Object.defineProperty(table, "__svc_table", { value: () => describe(name, cols, table, extra) });
    return table;
  }

  const api = Object.assign({}, columnBuilders, {
    pgTable,
    index: (name) => new IndexBuilder(name, false),
    uniqueIndex: (name) => new IndexBuilder(name, true),
    unique: (name) => new UniqueBuilder(name),
    primaryKey,
    foreignKey: (config) => new ForeignKeyBuilder(config),
    sql,
    // Relations only matter to queries; a schema may declare them.
    relations: () => ({}),
  });

  return api;
})()
