/**
 * Fastify's own schema compilers (ajv for requests, fast-json-stringify for responses),
 * deferred to the first request of each route. Fastify compiles every route's schemas when
 * it gets ready, which on the device API is a quarter of the start-up, and a device answers
 * `/ping` long before most routes are ever called. The compiled functions are the same as
 * eager ones, so validation and serialization do not change; only when they are built.
 * One difference: fastify treats a compilers factory as custom and passes a `headers`
 * schema as written instead of lowercasing its names, so name headers in lowercase.
 *
 * ajv and fast-json-stringify themselves load with the first request of a route that has a
 * schema (loadOnRequest), not at start: setting them up took about 0.5 MiB of the device
 * bundle's idle RSS on Node 24 (bench/supervisor-idle.bench.ts), and the compile that needs
 * them is synchronous, so an onRequest hook loads them before it.
 */
import type { FastifyInstance, FastifyServerOptions } from 'fastify';

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
  /** Makes `app` (built with compilersFactory) load the compilers before the first request that has a schema. */
  loadOnRequest(app: FastifyInstance): void;
  /** Compiles every schema deferred so far and says how many; a bad schema rejects here, as fastify would throw at ready(). */
  compileAll(): Promise<number>;
}

interface Builders {
  validator: Builder;
  serializer: Builder;
}

export function lazySchemaCompilers(): LazySchemaCompilers {
  let builders: Builders | undefined;
  let loading: Promise<void> | undefined;
  const load = (): Promise<void> =>
    (loading ??= Promise.all([import('@fastify/ajv-compiler'), import('@fastify/fast-json-stringify-compiler')]).then(([ajv, fjs]) => {
      builders = { validator: ajv.AjvCompiler() as unknown as Builder, serializer: fjs.SerializerSelector() as unknown as Builder };
    }));
  const loaded = (): Builders => {
    if (!builders) throw new Error('a schema was compiled before its compilers were loaded: the app needs loadOnRequest()');
    return builders;
  };
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
    (which: keyof Builders): Builder =>
    (externalSchemas, options) => {
      let compiler: RouteCompiler | undefined;
      return (route) => defer(() => (compiler ??= loaded()[which](externalSchemas, options))(route));
    };
  return {
    compilersFactory: {
      buildValidator: lazily('validator'),
      buildSerializer: lazily('serializer'),
    } as unknown as CompilersFactory,
    loadOnRequest(app) {
      // Before every other hook: an answer from one (a 401, say) may be serialized with the route's schema.
      app.addHook('onRequest', (request, _reply, done) => {
        if (builders || !request.routeOptions.schema) return done();
        load().then(() => done(), done);
      });
    },
    compileAll: async () => {
      await load();
      const all = [...pending];
      for (const force of all) force();
      return all.length;
    },
  };
}
