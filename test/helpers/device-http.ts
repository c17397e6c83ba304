/** Calls to a running device's API over HTTP with its key in `?apikey=`, as a service would. */
export interface DeviceReply {
  status: number;
  text: string;
  json(): any;
}

export function deviceHttp(device: () => { url: string; key: string }) {
  return async (method: string, path: string, body?: unknown): Promise<DeviceReply> => {
    const { url, key } = device();
    const res = await fetch(`${url}${path}${path.includes('?') ? '&' : '?'}apikey=${key}`, {
      method,
      ...(body !== undefined ? { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } } : {}),
    });
    const text = await res.text();
    return { status: res.status, text, json: () => JSON.parse(text) };
  };
}
