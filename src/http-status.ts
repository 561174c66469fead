/** The HTTP status rules the proxy, the measuring path and the simulator share (https://www.rfc-editor.org/rfc/rfc9110#section-15). */

/** A 2xx: the request succeeded. */
export const isSuccess = (status: number): boolean => status >= 200 && status < 300

/** An answer with no body whatever its headers say: to HEAD, a 1xx, 204 or 304 (https://www.rfc-editor.org/rfc/rfc9112#section-6.3). */
export const isBodiless = (method: string, status: number): boolean =>
  method === 'HEAD' || status < 200 || status === 204 || status === 304
