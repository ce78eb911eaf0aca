/** The file, in its data directory, where a daemon started without a token keeps the one it made. */
export declare const TOKEN_FILE_NAME: "token";
/** The Host of requests sent over a unix socket. */
export declare const UNIX_HOST: "agentbox";
/** The token file cannot be used: it is not private, not ours, or holds no token. */
export declare class TokenFileError extends Error {
	name: "TokenFileError";
}
/** The data directory of a daemon started with no --data-dir, from env; undefined when none is set. */
export declare function dataDir(env: Record<string, string | undefined>): string | undefined;
/** A daemon's token file; throws TokenFileError for a file others can read, another user's, or not a token. */
export declare function readTokenFile(file: string): string;
/** Whether url names this machine (a unix socket, loopback, localhost or an unspecified address). */
export declare function isLocalUrl(url: string): boolean;
/** The token of a local daemon at baseUrl from its data directory; undefined when not local or no file. */
export declare function localToken(baseUrl: string, env: Record<string, string | undefined>): string | undefined;
/** Throws TokenFileError when the unix socket belongs to another user than this one or root. */
export declare function checkSocketOwner(sock: string): void;
/** A fetch over a unix socket (node:http with socketPath, Host: agentbox). */
export declare function unixFetch(sock: string): typeof globalThis.fetch;
/** Throws TokenFileError when the sockets listening at a loopback URL belong to another user than this one or root (Linux). */
export declare function checkTcpOwner(url: URL): void;
