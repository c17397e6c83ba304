/** A database or store URL as it may be printed: its `user:password@` part hidden. */
export const hideUrlPassword = (url: string): string => url.replace(/\/\/[^@]*@/, '//***@');
