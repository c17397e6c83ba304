import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { lazySchemaCompilers } from '../src/http/lazy-schema-compilers.js';
import { buildApi } from '../src/supervisor/api/server.js';
import { startSupervisorFixture, type SupervisorFixture } from './helpers/supervisor-fixture.js';

function appWith(schemas = lazySchemaCompilers()) {
  const app = Fastify({ logger: false, schemaController: { compilersFactory: schemas.compilersFactory } });
  schemas.loadOnRequest(app);
  app.post(
    '/echo',
    {
      schema: {
        body: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 2 } } },
        response: { 200: { type: 'object', properties: { name: { type: 'string' } } } },
      },
    },
    async (req) => ({ ...(req.body as object), secret: 'left out by the response schema' }),
  );
  return { app, schemas };
}

describe('lazy schema compilers', () => {
  it('validate and serialize as fastify does, compiling on the first request', async () => {
    const { app, schemas } = appWith();
    await app.ready();
    const bad = await app.inject({ method: 'POST', url: '/echo', payload: { name: 'x' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toBe('body/name must NOT have fewer than 2 characters');
    const missing = await app.inject({ method: 'POST', url: '/echo', payload: {} });
    expect(missing.json().message).toBe("body must have required property 'name'");
    const good = await app.inject({ method: 'POST', url: '/echo', payload: { name: 'pi' } });
    expect(good.statusCode).toBe(200);
    expect(good.json()).toEqual({ name: 'pi' });
    // The one route's body validator and response serializer are built already.
    expect(await schemas.compileAll()).toBe(0);
    await app.close();
  });

  it('defer a bad schema past ready() and report it from compileAll()', async () => {
    const schemas = lazySchemaCompilers();
    const app = Fastify({ logger: false, schemaController: { compilersFactory: schemas.compilersFactory } });
    app.post('/bad', { schema: { body: { type: 'no-such-type' } } }, async () => 'never');
    await app.ready();
    await expect(schemas.compileAll()).rejects.toThrow(/no-such-type|type must be/);
    await app.close();
  });
});

describe('the device API with lazy schemas', () => {
  let f: SupervisorFixture;
  beforeAll(async () => {
    f = await startSupervisorFixture({ localMode: true });
  }, 60_000);
  afterAll(async () => f?.close());

  it('compiles no schema to get ready, and every route schema compiles', async () => {
    const schemas = lazySchemaCompilers();
    const app = buildApi(f.sup, schemas);
    await app.ready();
    const ping = await app.inject({ method: 'GET', url: '/ping' });
    expect(ping.statusCode).toBe(200);
    // Every route's request and response schemas were left for their first request.
    expect(await schemas.compileAll()).toBeGreaterThanOrEqual(20);
    expect(await schemas.compileAll()).toBe(0);
    await app.close();
  });
});
