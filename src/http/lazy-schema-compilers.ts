/**
 * Fastify's own schema compilers (ajv for requests, fast-json-stringify for responses),
 * deferred to the first request of each route. Fastify compiles every route's schemas when
 * it gets ready, which on the device API is a quarter of the start-up, and a device answers
 * `/ping` long before most routes are ever called. The compiled functions are the same as
 * eager ones, so validation and serialization do not change; only when they are built.
 * One difference: fastify treats a compilers factory as custom and passes a `headers`
 * schema as written instead of lowercasing its names, so name headers in lowercase.
 */
import { AjvCompiler } from '@fastify/ajv-compiler';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import type { FastifyServerOptions } from 'fastify';

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type Compiled = ((data: unknown) => unknown) & { errors?: unknown };
type RouteCompiler = (route: unknown) => Compiled;
type Builder = (externalSchemas: unknown, options: unknown) => RouteCompiler;

/** A compiled function built on its first call; ajv reports errors on the function itself. */
function onFirstCall(build: () => Compiled): Compiled {
  let compiled: Compiled | undefined;
  const call: Compiled = (data) => {
    compiled ??= build();
    const result = compiled(data);
    call.errors = compiled.errors;
    return result;
  };
  return call;
}

export interface LazySchemaCompilers {
  compilersFactory: CompilersFactory;
  /** Compiles every schema deferred so far and says how many; a bad schema throws here, as fastify would at ready(). */
  compileAll(): number;
}

export function lazySchemaCompilers(): LazySchemaCompilers {
  const pending = new Set<() => void>();
  const defer = (build: () => Compiled): Compiled => {
    let built: Compiled | undefined;
    const once = (): Compiled => {
      pending.delete(force);
      return (built ??= build());
    };
    const force = (): void => void once();
    pending.add(force);
    return onFirstCall(once);
  };
  // Fastify's factory types describe what ajv and fast-json-stringify return in full; it only
  // ever calls the functions, and so does this wrapper.
  const lazily =
    (eager: Builder): Builder =>
    (externalSchemas, options) => {
      let compiler: RouteCompiler | undefined;
      return (route) => defer(() => (compiler ??= eager(externalSchemas, options))(route));
    };
  return {
    compilersFactory: {
      buildValidator: lazily(AjvCompiler() as unknown as Builder),
      buildSerializer: lazily(SerializerSelector() as unknown as Builder),
    } as unknown as CompilersFactory,
    compileAll: () => {
      const all = [...pending];
      for (const force of all) force();
      return all.length;
    },
  };
}
