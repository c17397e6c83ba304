/**
 * Makes the device bundle's module bodies part of Node's compile cache. The cache
 * (NODE_COMPILE_CACHE) holds what V8 compiled when the bundle was compiled, before it ran: its
 * top level and the functions V8 compiles eagerly. esbuild wraps each bundled module's body in
 * an arrow function (its `__commonJS` and `__esm` helpers) that V8 compiles lazily, on the
 * call, so every start compiled every module it loaded again. A function in parentheses is
 * one V8 expects to be called at once and compiles eagerly; so parenthesized, the bodies are
 * compiled into the cache with the top level. Measured on Node 24 (the bundle, compile cache
 * filled, device flags): spawn to the first /ping 240 -> 182 ms (medians of 20 alternating
 * starts), idle RSS unchanged (64.6 MiB both).
 */
type TypeScript = typeof import('typescript');

/**
 * `source` (esbuild's minified ES module output) with the function given to each call of a
 * module-wrapper helper in parentheses, and how many it wrapped. The helpers are found by
 * their shape: a top-level `var h = (...) => () => {...}`, a function that returns the thunk a
 * module is loaded by. Whatever else had that shape would only have its argument compiled
 * eagerly too: parentheses change nothing else.
 */
export function eagerModuleBodies(ts: TypeScript, source: string): { source: string; bodies: number } {
  const file = ts.createSourceFile('bundle.mjs', source, ts.ScriptTarget.Latest, false, ts.ScriptKind.JS);
  const helpers = new Set<string>();
  for (const statement of file.statements) {
    if (!ts.isVariableStatement(statement)) continue;
    for (const d of statement.declarationList.declarations) {
      if (ts.isIdentifier(d.name) && d.initializer && ts.isArrowFunction(d.initializer) && ts.isArrowFunction(d.initializer.body)) helpers.add(d.name.text);
    }
  }
  const bodies: Array<{ start: number; end: number }> = [];
  const visit = (node: import('typescript').Node): void => {
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && helpers.has(node.expression.text) && node.arguments.length === 1) {
      const body = node.arguments[0]!;
      // esbuild puts every wrapper at the top level: none stands inside a module body.
      if (ts.isArrowFunction(body)) return void bodies.push({ start: body.getStart(file), end: body.end });
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  const parts: string[] = [];
  let at = 0;
  for (const { start, end } of bodies.sort((a, b) => a.start - b.start)) {
    parts.push(source.slice(at, start), '(', source.slice(start, end), ')');
    at = end;
  }
  parts.push(source.slice(at));
  return { source: parts.join(''), bodies: bodies.length };
}
