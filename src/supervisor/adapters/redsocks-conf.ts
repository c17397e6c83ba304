/**
 * The proxy configuration files of the host OS, in the format balenaOS uses on its boot
 * partition (system-proxy/redsocks.conf and system-proxy/no_proxy):
 *
 *   base { log_debug = off; ... redirector = iptables; }
 *   redsocks { type = socks5; ip = 10.0.0.1; port = 1080; login = "u"; password = "p";
 *              local_ip = 127.0.0.1; local_port = 12345; }
 *
 * Values are validated or escaped so that no input can add a line, a key or a section:
 * login and password are redsocks C-style quoted strings (\\ and \" escaped, control
 * characters refused); type, ip and port must match redsocks' unquoted token rules.
 * The parser follows redsocks' own tokenizer (parser.c gettoken), so whatever we write
 * reads back identically, and hand-edited files with comments still parse.
 */
import { FleetlabError, badRequest } from '../../errors.js';
import type { ProxySettings, ProxyType } from './ports.js';

export const PROXY_TYPES: readonly ProxyType[] = ['socks4', 'socks5', 'http-connect', 'http-relay'];

/** Where redsocks listens for redirected connections (as balenaOS configures it). */
const LOCAL_IP = '127.0.0.1';
const LOCAL_PORT = 12345;

const BASE_BLOCK: ReadonlyArray<[string, string]> = [
  ['log_debug', 'off'],
  ['log_info', 'on'],
  ['log', 'stderr'],
  ['daemon', 'off'],
  ['redirector', 'iptables'],
];

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
// redsocks reads an unquoted value starting with a letter as [A-Za-z0-9_.-]*, so a DNS name
// must start with a letter to be one token.
const DNS_NAME = /^(?=.{1,253}$)[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const CONTROL = /[\u0000-\u001f\u007f]/;
const NO_PROXY_ENTRY = /^[^\s\u0000-\u001f\u007f]+$/;

/** Throws SUP_ERR_BAD_REQUEST naming the first field that cannot be written safely. */
export function validateProxy(proxy: ProxySettings): void {
  if (!PROXY_TYPES.includes(proxy.type)) {
    throw badRequest(`proxy.type must be one of ${PROXY_TYPES.join(', ')}`);
  }
  if (typeof proxy.ip !== 'string' || !(IPV4.test(proxy.ip) || DNS_NAME.test(proxy.ip))) {
    throw badRequest('proxy.ip must be an IPv4 address or a host name starting with a letter');
  }
  if (!Number.isInteger(proxy.port) || proxy.port < 1 || proxy.port > 65535) {
    throw badRequest('proxy.port must be an integer from 1 to 65535');
  }
  for (const field of ['login', 'password'] as const) {
    const value = proxy[field];
    if (value === undefined) continue;
    if (typeof value !== 'string' || CONTROL.test(value)) {
      throw badRequest(`proxy.${field} must be a string without control characters (such as newlines)`);
    }
  }
  if (proxy.noProxy !== undefined) {
    if (!Array.isArray(proxy.noProxy)) throw badRequest('proxy.noProxy must be a list of strings');
    for (const entry of proxy.noProxy) {
      if (typeof entry !== 'string' || !NO_PROXY_ENTRY.test(entry)) {
        throw badRequest('proxy.noProxy entries must be non-empty and contain no spaces or control characters');
      }
    }
  }
}

function quote(value: string): string {
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

function block(name: string, entries: ReadonlyArray<[string, string]>): string {
  return `${name} {\n${entries.map(([key, value]) => `\t${key} = ${value};`).join('\n')}\n}\n`;
}

/** redsocks.conf for the proxy; validates first. */
export function formatRedsocksConf(proxy: ProxySettings): string {
  validateProxy(proxy);
  const entries: Array<[string, string]> = [
    ['type', proxy.type],
    ['ip', proxy.ip],
    ['port', String(proxy.port)],
  ];
  if (proxy.login !== undefined && proxy.login !== '') entries.push(['login', quote(proxy.login)]);
  if (proxy.password !== undefined && proxy.password !== '') entries.push(['password', quote(proxy.password)]);
  entries.push(['local_ip', LOCAL_IP], ['local_port', String(LOCAL_PORT)]);
  return `${block('base', BASE_BLOCK)}\n${block('redsocks', entries)}`;
}

/** The no_proxy file: one entry a line; undefined when there is nothing to write. */
export function formatNoProxy(noProxy: readonly string[] | undefined): string | undefined {
  if (!noProxy || noProxy.length === 0) return undefined;
  return `${noProxy.join('\n')}\n`;
}

export function parseNoProxy(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line.length > 0);
}

const UNESCAPE: Record<string, string> = { n: '\n', t: '\t', r: '\r', '\\': '\\', "'": "'", '"': '"' };

type Token = { kind: 'word' | 'string' | 'punct'; text: string };

/** redsocks' tokenizer: quoted C strings, plain words, { } = ; and both comment styles. */
function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c)) {
      i++;
    } else if (text.startsWith('//', i)) {
      const end = text.indexOf('\n', i);
      i = end < 0 ? text.length : end + 1;
    } else if (text.startsWith('/*', i)) {
      const end = text.indexOf('*/', i + 2);
      if (end < 0) throw new Error('unterminated comment');
      i = end + 2;
    } else if (c === '"') {
      let value = '';
      i++;
      for (;;) {
        if (i >= text.length) throw new Error('unterminated string');
        const d = text[i]!;
        if (d === '"') break;
        if (d === '\\') {
          const escaped = UNESCAPE[text[i + 1] ?? ''];
          if (escaped === undefined) throw new Error('unknown escape after \\');
          value += escaped;
          i += 2;
        } else {
          value += d;
          i++;
        }
      }
      i++;
      tokens.push({ kind: 'string', text: value });
    } else if ('{}=;'.includes(c)) {
      tokens.push({ kind: 'punct', text: c });
      i++;
    } else {
      // A slash belongs to the word (a netmask) unless it starts a comment.
      const match = /^(?:[A-Za-z0-9_.:-]|\/(?![/*]))+/.exec(text.slice(i));
      if (!match) throw new Error(`unexpected character ${JSON.stringify(c)}`);
      tokens.push({ kind: 'word', text: match[0] });
      i += match[0].length;
    }
  }
  return tokens;
}

/** Sections in file order, each a key -> value map. */
function parseSections(text: string): Array<{ name: string; values: Map<string, string> }> {
  const tokens = tokenize(text);
  const sections: Array<{ name: string; values: Map<string, string> }> = [];
  let i = 0;
  const expect = (what: string): Token => {
    const token = tokens[i++];
    if (!token) throw new Error(`expected ${what}, found end of file`);
    return token;
  };
  while (i < tokens.length) {
    const name = expect('a section name');
    if (name.kind !== 'word') throw new Error(`expected a section name, found ${JSON.stringify(name.text)}`);
    if (expect('{').text !== '{') throw new Error(`expected { after ${name.text}`);
    const values = new Map<string, string>();
    for (;;) {
      const key = expect('a key or }');
      if (key.kind === 'punct' && key.text === '}') break;
      if (key.kind !== 'word') throw new Error(`expected a key, found ${JSON.stringify(key.text)}`);
      if (expect('=').text !== '=') throw new Error(`expected = after ${key.text}`);
      const value = expect(`a value for ${key.text}`);
      if (value.kind === 'punct') throw new Error(`expected a value for ${key.text}`);
      if (expect(';').text !== ';') throw new Error(`expected ; after ${key.text}`);
      values.set(key.text, value.text);
    }
    sections.push({ name: name.text, values });
  }
  return sections;
}

/**
 * ProxySettings from redsocks.conf text (noProxy is read separately). Throws
 * SUP_ERR_HOST when the file is not valid redsocks configuration or lacks type, ip or port.
 */
export function parseRedsocksConf(text: string, source = 'redsocks.conf'): ProxySettings | undefined {
  let sections;
  try {
    sections = parseSections(text);
  } catch (err) {
    throw new FleetlabError('SUP_ERR_HOST', `${source} is not valid redsocks configuration: ${(err as Error).message}`);
  }
  const redsocks = sections.find((section) => section.name === 'redsocks');
  if (!redsocks) return undefined;
  const type = redsocks.values.get('type');
  const ip = redsocks.values.get('ip');
  const port = Number(redsocks.values.get('port'));
  if (!type || !PROXY_TYPES.includes(type as ProxyType) || !ip || !Number.isInteger(port)) {
    throw new FleetlabError('SUP_ERR_HOST', `${source}: the redsocks section needs a known type, an ip and a numeric port`);
  }
  const proxy: ProxySettings = { type: type as ProxyType, ip, port };
  const login = redsocks.values.get('login');
  const password = redsocks.values.get('password');
  if (login !== undefined) proxy.login = login;
  if (password !== undefined) proxy.password = password;
  return proxy;
}
