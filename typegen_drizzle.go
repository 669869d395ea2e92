package main

// typegenDrizzleDTS is .svc/drizzle.d.ts: the types of the built-in stand-in
// for "drizzle-orm" and "drizzle-orm/pg-core" (js/drizzle_pg_core.js), which
// both paths resolve to when a file compiles. It declares only what the
// stand-in implements, and types the tables of src/schema.ts for user code:
// typeof orders.$inferSelect is a row as read, typeof orders.$inferInsert a
// row to write (columns that are nullable or have a default are optional).
// An ambient module declaration wins over node_modules, so the types hold
// even when the project installed drizzle-orm.
const typegenDrizzleDTS = typegenHeader + `declare module "drizzle-orm" {
  /** SQL text: sql` + "`…`" + ` inlines columns as names and values as SQL literals. For defaults and index conditions of src/schema.ts. */
  export interface SQL {
    readonly text: string;
  }
  export function sql(strings: TemplateStringsArray, ...values: unknown[]): SQL;
  export namespace sql {
    /** SQL text used as is. */
    function raw(text: string): SQL;
  }
  /** Relations only matter to drizzle's queries: accepted and ignored. */
  export function relations(table: unknown, config: (helpers: any) => Record<string, unknown>): {};
  /** A row of the table as read. */
  export type InferSelectModel<T extends { $inferSelect: unknown }> = T["$inferSelect"];
  /** A row of the table to insert. */
  export type InferInsertModel<T extends { $inferInsert: unknown }> = T["$inferInsert"];
}

declare module "drizzle-orm/pg-core" {
  import type { SQL } from "drizzle-orm";

  // Declarations without export stay private (the export list says so).
  export {};
  const columnTypes: unique symbol;
  /** A column: T is the type of its values; NotNull and HasDefault decide the row types. */
  export interface PgColumn<T = unknown, NotNull extends boolean = boolean, HasDefault extends boolean = boolean> {
    /** The column's SQL name: the one given, else the property name in pgTable. */
    readonly name: string;
    /** Types only: absent at run time. */
    readonly [columnTypes]?: { data: T; notNull: NotNull; hasDefault: HasDefault };
    primaryKey(): PgColumn<T, true, HasDefault>;
    notNull(): PgColumn<T, true, HasDefault>;
    default(value: T | SQL): PgColumn<T, NotNull, true>;
    defaultNow(): PgColumn<T, NotNull, true>;
    /** uuid columns only: gen_random_uuid(). */
    defaultRandom(): PgColumn<T, NotNull, true>;
    unique(name?: string, config?: { nulls: "distinct" | "not distinct" }): PgColumn<T, NotNull, HasDefault>;
    references(ref: () => PgColumn<any, boolean, boolean>, actions?: { onDelete?: ReferenceAction; onUpdate?: ReferenceAction }): PgColumn<T, NotNull, HasDefault>;
    /** Narrows the type of the values (no SQL). */
    $type<U>(): PgColumn<U, NotNull, HasDefault>;
    /** A default computed by the application (no SQL): the column becomes optional on insert. */
    $defaultFn(fn: () => T | SQL): PgColumn<T, NotNull, true>;
    $default(fn: () => T | SQL): PgColumn<T, NotNull, true>;
    $onUpdateFn(fn: () => T | SQL): PgColumn<T, NotNull, true>;
    $onUpdate(fn: () => T | SQL): PgColumn<T, NotNull, true>;
    /** Sort orders inside index(…).on(…). */
    asc(): SQL;
    desc(): SQL;
  }
  export type ReferenceAction = "cascade" | "restrict" | "no action" | "set null" | "set default";

  /** A column builder: f(), f(name), f(config) or f(name, config). */
  export interface ColumnBuilder<T, C = {}, NotNull extends boolean = false, HasDefault extends boolean = false> {
    (name?: string, config?: C): PgColumn<T, NotNull, HasDefault>;
    (config?: C): PgColumn<T, NotNull, HasDefault>;
  }
  /** A text column builder; { enum: [...] } narrows the type to those strings (no SQL check). */
  export interface TextColumnBuilder<C = {}> {
    <const E extends readonly [string, ...string[]]>(name: string, config: C & { enum: E }): PgColumn<E[number], false, false>;
    <const E extends readonly [string, ...string[]]>(config: C & { enum: E }): PgColumn<E[number], false, false>;
    (name?: string, config?: C): PgColumn<string, false, false>;
    (config?: C): PgColumn<string, false, false>;
  }

  export const serial: ColumnBuilder<number, {}, true, true>;
  // Row types are what svc's sql reads (docs/workflows.md, "sql"): int8 and numeric as exact
  // decimal strings, timestamp as a Date, date as "YYYY-MM-DD"; a mode is accepted
  // for drizzle compatibility and changes nothing.
  export const bigserial: ColumnBuilder<string, { mode?: "number" | "bigint" }, true, true>;
  export const smallint: ColumnBuilder<number>;
  export const integer: ColumnBuilder<number>;
  export const bigint: ColumnBuilder<string, { mode?: "number" | "bigint" }>;
  export const text: TextColumnBuilder;
  export const varchar: TextColumnBuilder<{ length?: number }>;
  export const boolean: ColumnBuilder<boolean>;
  export const timestamp: ColumnBuilder<Date, { mode?: "date" | "string"; precision?: 0 | 1 | 2 | 3 | 4 | 5 | 6; withTimezone?: boolean }>;
  export const date: ColumnBuilder<string, { mode?: "string" | "date" }>;
  export const json: ColumnBuilder<unknown>;
  export const jsonb: ColumnBuilder<unknown>;
  export const uuid: ColumnBuilder<string>;
  export const numeric: ColumnBuilder<string, { precision?: number; scale?: number }>;
  export const real: ColumnBuilder<number>;
  export const doublePrecision: ColumnBuilder<number>;

  /** The builders, as pgTable's columns callback receives them. */
  export interface ColumnBuilders {
    serial: typeof serial;
    bigserial: typeof bigserial;
    smallint: typeof smallint;
    integer: typeof integer;
    bigint: typeof bigint;
    text: typeof text;
    varchar: typeof varchar;
    boolean: typeof boolean;
    timestamp: typeof timestamp;
    date: typeof date;
    json: typeof json;
    jsonb: typeof jsonb;
    uuid: typeof uuid;
    numeric: typeof numeric;
    real: typeof real;
    doublePrecision: typeof doublePrecision;
  }

  export type PgColumns = Record<string, PgColumn<any, boolean, boolean>>;
  type Simplify<T> = { [K in keyof T]: T[K] } & {};
  type Value<C> = C extends PgColumn<infer T, infer NotNull, any> ? (NotNull extends true ? T : T | null) : never;
  type RequiredOnInsert<C extends PgColumns> = { [K in keyof C]: C[K] extends PgColumn<any, true, false> ? K : never }[keyof C];
  /** A row as read: nullable columns may be null. */
  export type InferSelect<C extends PgColumns> = Simplify<{ [K in keyof C]: Value<C[K]> }>;
  /** A row to insert: columns that are nullable or have a default are optional. */
  export type InferInsert<C extends PgColumns> = Simplify<
    { [K in RequiredOnInsert<C>]: Value<C[K]> } & { [K in Exclude<keyof C, RequiredOnInsert<C>>]?: Value<C[K]> }
  >;
  /** A table: its columns by property name, and its row types (types only: absent at run time). */
  export type PgTable<C extends PgColumns> = C & {
    readonly $inferSelect: InferSelect<C>;
    readonly $inferInsert: InferInsert<C>;
  };

  export interface IndexBuilder {
    on(...columns: (PgColumn<any, boolean, boolean> | SQL)[]): IndexBuilder;
    onOnly(...columns: (PgColumn<any, boolean, boolean> | SQL)[]): IndexBuilder;
    using(method: string, ...columns: (PgColumn<any, boolean, boolean> | SQL)[]): IndexBuilder;
    where(condition: SQL): IndexBuilder;
  }
  export interface UniqueBuilder {
    on(...columns: PgColumn<any, boolean, boolean>[]): UniqueBuilder;
    nullsNotDistinct(): UniqueBuilder;
  }
  export interface ForeignKeyBuilder {
    onDelete(action: ReferenceAction): ForeignKeyBuilder;
    onUpdate(action: ReferenceAction): ForeignKeyBuilder;
  }
  export interface PrimaryKey {
    readonly kind: "primaryKey";
  }
  export type TableExtra = IndexBuilder | UniqueBuilder | ForeignKeyBuilder | PrimaryKey;

  export function pgTable<C extends PgColumns>(
    name: string,
    columns: C | ((builders: ColumnBuilders) => C),
    extra?: (table: C) => TableExtra[] | Record<string, TableExtra>,
  ): PgTable<C>;
  export function index(name?: string): IndexBuilder;
  export function uniqueIndex(name?: string): IndexBuilder;
  export function unique(name?: string): UniqueBuilder;
  export function primaryKey(config: { name?: string; columns: PgColumn<any, boolean, boolean>[] }): PrimaryKey;
  export function primaryKey(...columns: PgColumn<any, boolean, boolean>[]): PrimaryKey;
  export function foreignKey(config: {
    name?: string;
    columns: PgColumn<any, boolean, boolean>[];
    foreignColumns: PgColumn<any, boolean, boolean>[];
  }): ForeignKeyBuilder;
}
`
