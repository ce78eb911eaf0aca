import {
  BaseClient,
  parseOrThrow,
  type Parsed,
  type RequestParams,
} from "./base-client.js";
import {
  type CommandFinishedData,
  SessionAndRoutesResponse,
  SessionResponse,
  InteractiveSessionResponse,
  StopSessionResponse,
  SessionsResponse,
  CommandResponse,
  CommandFinishedResponse,
  EmptyResponse,
  LogLine,
  type LogOutputLine,
  SnapshotsResponse,
  SnapshotTreeResponse,
  SnapshotResponse,
  CreateSnapshotResponse,
  SandboxAndSessionResponse,
  SandboxesPaginationResponse,
  UpdateSandboxResponse,
  type CommandData,
} from "./validators.js";
import { APIError, StreamError } from "./api-error.js";
import { FileWriter } from "./file-writer.js";
import { VERSION } from "../version.js";
import { consumeReadable } from "../utils/consume-readable.js";
import { z } from "zod";
import jsonlines from "jsonlines";
import os from "os";
import { Readable } from "stream";
import { normalizePath } from "../utils/normalizePath.js";
import { getVercelOidcToken } from "@vercel/oidc";
import { NetworkPolicy } from "../network-policy.js";
import { toAPINetworkPolicy } from "../utils/network-policy.js";
import { getPrivateParams, WithPrivate } from "../utils/types.js";
import type { RUNTIMES, SandboxRegion } from "../constants.js";

interface Claims {
  owner_id: string;
  project_id?: string;
}

function decodeUnverifiedToken(token: string): Claims | null {
  if (token.split(".").length !== 3) {
    return null;
  }
  try {
    const payload = JSON.parse(
      Buffer.from(token.split(".")[1], "base64url").toString("utf8"),
    );
    if (payload.owner_id) {
      return { owner_id: payload.owner_id, project_id: payload.project_id };
    }
    return null;
  } catch {
    return null;
  }
}

export interface WithFetchOptions {
  fetch?: typeof globalThis.fetch;
}

export class APIClient extends BaseClient {
  private teamId: string;
  private projectId: string | undefined;
  private isJwtToken: boolean;

  constructor(params: {
    baseUrl?: string;
    teamId: string;
    token: string;
    fetch?: typeof globalThis.fetch;
  }) {
    super({
      baseUrl: params.baseUrl ?? "https://vercel.com/api",
      token: params.token,
      debug: false,
      fetch: params.fetch,
    });

    this.teamId = params.teamId;
    this.isJwtToken = false;

    const claims = decodeUnverifiedToken(params.token);
    if (claims) {
      this.isJwtToken = true;
      this.projectId = claims.project_id;
      this.teamId = claims.owner_id;
    }
  }

  private async ensureValidToken(): Promise<void> {
    if (!this.isJwtToken) {
      return;
    }

    try {
      // Use getVercelOidcToken to refresh the token with team/project scope
      const freshToken = await getVercelOidcToken({
        expirationBufferMs: 5 * 60 * 1000, // 5 minutes
        team: this.teamId,
        project: this.projectId,
      });

      // Update token if it changed
      if (freshToken !== this.token) {
        this.token = freshToken;

        const claims = decodeUnverifiedToken(freshToken);
        if (claims) {
          this.teamId = claims.owner_id;
        }
      }
    } catch {
      // Ignore refresh errors and continue with current token
    }
  }

  protected async request(path: string, params?: RequestParams) {
    await this.ensureValidToken();

    return super.request(path, {
      ...params,
      query: { teamId: this.teamId, ...params?.query },
      headers: {
        "content-type": "application/json",
        "user-agent": `vercel/sandbox/${VERSION} (Node.js/${process.version}; ${os.platform()}/${os.arch()})`,
        ...params?.headers,
      },
    });
  }

  async getSession(
    params: WithPrivate<{ sessionId: string; signal?: AbortSignal }>,
  ) {
    const privateParams = getPrivateParams(params);
    let querystring = new URLSearchParams(privateParams).toString();
    querystring = querystring ? `?${querystring}` : "";
    return parseOrThrow(
      SessionAndRoutesResponse,
      await this.request(
        `/v2/sandboxes/sessions/${params.sessionId}${querystring}`,
        {
          signal: params.signal,
        },
      ),
    );
  }

  async createSandbox(
    params: WithPrivate<{
      name?: string;
      ports?: number[];
      projectId: string;
      source?:
        | {
            type: "git";
            url: string;
            depth?: number;
            revision?: string;
            username?: string;
            password?: string;
          }
        | { type: "tarball"; url: string }
        | { type: "snapshot"; snapshotId: string };
      timeout?: number;
      resources?: { vcpus: number };
      persistent?: boolean;
      runtime?: RUNTIMES | (string & {});
      image?: string;
      networkPolicy?: NetworkPolicy;
      env?: Record<string, string>;
      tags?: Record<string, string>;
      snapshotExpiration?: number;
      keepLastSnapshots?: {
        count: number;
        expiration?: number;
        deleteEvicted?: boolean;
      };
      region?: SandboxRegion;
      failoverRegions?: SandboxRegion[];
      signal?: AbortSignal;
    }>,
  ) {
    const privateParams = getPrivateParams(params);
    const endpoint =
      params.runtime === undefined ? "/v3/sandboxes" : "/v2/sandboxes";
    return parseOrThrow(
      SandboxAndSessionResponse,
      await this.request(endpoint, {
        method: "POST",
        body: JSON.stringify({
          projectId: params.projectId,
          ports: params.ports,
          source: params.source,
          timeout: params.timeout,
          resources: params.resources,
          runtime: params.runtime,
          image: params.image,
          name: params.name,
          persistent: params.persistent,
          networkPolicy: params.networkPolicy
            ? toAPINetworkPolicy(params.networkPolicy)
            : undefined,
          env: params.env,
          tags: params.tags,
          snapshotExpiration: params.snapshotExpiration,
          keepLastSnapshots: params.keepLastSnapshots,
          region: params.region,
          failoverRegions: params.failoverRegions,
          ...privateParams,
        }),
        signal: params.signal,
      }),
    );
  }

  async forkSandbox(
    params: WithPrivate<{
      sourceSandbox: string;
      projectId: string;
      name?: string;
      ports?: number[];
      timeout?: number;
      resources?: { vcpus: number };
      persistent?: boolean;
      image?: string;
      networkPolicy?: NetworkPolicy;
      env?: Record<string, string>;
      tags?: Record<string, string>;
      snapshotExpiration?: number;
      keepLastSnapshots?: {
        count: number;
        expiration?: number;
        deleteEvicted?: boolean;
      };
      region?: SandboxRegion;
      failoverRegions?: SandboxRegion[];
      signal?: AbortSignal;
    }>,
  ) {
    const privateParams = getPrivateParams(params);
    return parseOrThrow(
      SandboxAndSessionResponse,
      await this.request(
        `/v2/sandboxes/${encodeURIComponent(params.sourceSandbox)}/fork`,
        {
          method: "POST",
          query: { projectId: params.projectId },
          body: JSON.stringify({
            name: params.name,
            ports: params.ports,
            timeout: params.timeout,
            resources: params.resources,
            image: params.image,
            persistent: params.persistent,
            networkPolicy: params.networkPolicy
              ? toAPINetworkPolicy(params.networkPolicy)
              : undefined,
            env: params.env,
            tags: params.tags,
            snapshotExpiration: params.snapshotExpiration,
            keepLastSnapshots: params.keepLastSnapshots,
            region: params.region,
            failoverRegions: params.failoverRegions,
            ...privateParams,
          }),
          signal: params.signal,
        },
      ),
    );
  }

  async runCommand(params: {
    sessionId: string;
    cwd?: string;
    command: string;
    args: string[];
    env: Record<string, string>;
    sudo: boolean;
    wait: true;
    logs?: boolean;
    onLog?: (log: LogOutputLine) => void;
    timeout?: number;
    signal?: AbortSignal;
  }): Promise<{
    command: CommandData;
    finished: Promise<CommandFinishedData>;
  }>;
  async runCommand(params: {
    sessionId: string;
    cwd?: string;
    command: string;
    args: string[];
    env: Record<string, string>;
    sudo: boolean;
    wait?: false;
    timeout?: number;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof CommandResponse>>>;
  async runCommand(params: {
    sessionId: string;
    cwd?: string;
    command: string;
    args: string[];
    env: Record<string, string>;
    sudo: boolean;
    wait?: boolean;
    logs?: boolean;
    onLog?: (log: LogOutputLine) => void;
    timeout?: number;
    signal?: AbortSignal;
  }): Promise<
    | {
        command: CommandData;
        finished: Promise<CommandFinishedData>;
      }
    | Parsed<z.infer<typeof CommandResponse>>
  > {
    if (params.wait) {
      const response = await this.request(
        `/v2/sandboxes/sessions/${params.sessionId}/cmd`,
        {
          method: "POST",
          body: JSON.stringify({
            command: params.command,
            args: params.args,
            cwd: params.cwd,
            env: params.env,
            sudo: params.sudo,
            wait: true,
            logs: params.logs || undefined,
            timeout: params.timeout,
          }),
          signal: params.signal,
        },
      );

      if (!response.ok) {
        await parseOrThrow(z.any(), response);
      }

      if (response.headers.get("content-type") !== "application/x-ndjson") {
        throw new APIError(response, {
          message: "Expected a stream of command data",
          sessionId: params.sessionId,
        });
      }

      if (response.body === null) {
        throw new APIError(response, {
          message: "No response body",
          sessionId: params.sessionId,
        });
      }

      const jsonlinesStream = jsonlines.parse();
      pipe(response.body, jsonlinesStream, { signal: params.signal }).catch(
        (err) => {
          console.error("Error piping command stream:", err);
        },
      );

      const iterator = jsonlinesStream[Symbol.asyncIterator]();
      const commandChunk = await iterator.next();
      if (commandChunk.done) {
        throw new StreamError(
          "stream_ended_early",
          "Stream ended before command data was received",
          params.sessionId,
        );
      }
      const { command } = CommandResponse.parse(commandChunk.value);

      const finished = (async () => {
        while (true) {
          const chunk = await iterator.next();
          if (chunk.done) {
            throw new StreamError(
              "stream_ended_early",
              "Stream ended before command finished",
              params.sessionId,
            );
          }

          if (chunk.value?.command) {
            const { command } = CommandFinishedResponse.parse(chunk.value);
            return command;
          }

          const parsed = LogLine.parse(chunk.value);
          if (parsed.stream === "error") {
            throw new StreamError(
              parsed.data.code,
              parsed.data.message,
              params.sessionId,
            );
          }
          params.onLog?.(parsed);
        }
      })();

      return { command, finished };
    }

    return parseOrThrow(
      CommandResponse,
      await this.request(`/v2/sandboxes/sessions/${params.sessionId}/cmd`, {
        method: "POST",
        body: JSON.stringify({
          command: params.command,
          args: params.args,
          cwd: params.cwd,
          env: params.env,
          sudo: params.sudo,
          timeout: params.timeout,
        }),
        signal: params.signal,
      }),
    );
  }

  async getCommand(params: {
    sessionId: string;
    cmdId: string;
    wait: true;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof CommandFinishedResponse>>>;
  async getCommand(params: {
    sessionId: string;
    cmdId: string;
    wait?: boolean;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof CommandResponse>>>;
  async getCommand(params: {
    sessionId: string;
    cmdId: string;
    wait?: boolean;
    signal?: AbortSignal;
  }) {
    return params.wait
      ? parseOrThrow(
          CommandFinishedResponse,
          await this.request(
            `/v2/sandboxes/sessions/${params.sessionId}/cmd/${params.cmdId}`,
            { signal: params.signal, query: { wait: "true" } },
          ),
        )
      : parseOrThrow(
          CommandResponse,
          await this.request(
            `/v2/sandboxes/sessions/${params.sessionId}/cmd/${params.cmdId}`,
            { signal: params.signal },
          ),
        );
  }

  async openInteractive(params: {
    sessionId: string;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof InteractiveSessionResponse>>> {
    return parseOrThrow(
      InteractiveSessionResponse,
      await this.request(
        `/v2/sandboxes/sessions/${params.sessionId}/interactive`,
        {
          method: "POST",
          body: JSON.stringify({}),
          signal: params.signal,
        },
      ),
    );
  }

  async mkDir(params: {
    sessionId: string;
    path: string;
    cwd?: string;
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      EmptyResponse,
      await this.request(
        `/v2/sandboxes/sessions/${params.sessionId}/fs/mkdir`,
        {
          method: "POST",
          body: JSON.stringify({ path: params.path, cwd: params.cwd }),
          signal: params.signal,
        },
      ),
    );
  }

  getFileWriter(params: {
    sessionId: string;
    extractDir: string;
    signal?: AbortSignal;
  }) {
    const writer = new FileWriter();
    return {
      response: (async () => {
        return this.request(
          `/v2/sandboxes/sessions/${params.sessionId}/fs/write`,
          {
            method: "POST",
            headers: {
              "content-type": "application/gzip",
              "x-cwd": params.extractDir,
            },
            body: await consumeReadable(writer.readable),
            signal: params.signal,
          },
        );
      })(),
      writer,
    };
  }

  async listSessions(params: {
    /**
     * The ID or name of the project to which the sessions belong.
     * @example "my-project"
     */
    projectId: string;
    /**
     * Filter sessions by sandbox name.
     */
    name?: string;
    /**
     * Maximum number of sessions to list from a request.
     * @example 10
     */
    limit?: number;
    /**
     * Cursor for pagination.
     */
    cursor?: string;
    /**
     * Sort order for results.
     */
    sortOrder?: "asc" | "desc";
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      SessionsResponse,
      await this.request(`/v2/sandboxes/sessions`, {
        query: {
          project: params.projectId,
          name: params.name,
          limit: params.limit,
          cursor: params.cursor,
          sortOrder: params.sortOrder,
        },
        method: "GET",
        signal: params.signal,
      }),
    );
  }

  async listSnapshots(params: {
    /**
     * The ID or name of the project to which the snapshots belong.
     * @example "my-project"
     */
    projectId: string;
    /**
     * Filter snapshots by sandbox name.
     */
    name?: string;
    /**
     * Maximum number of snapshots to list from a request.
     * @example 10
     */
    limit?: number;
    /**
     * Cursor for pagination.
     */
    cursor?: string;
    /**
     * Sort order for results.
     */
    sortOrder?: "asc" | "desc";
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      SnapshotsResponse,
      await this.request(`/v2/sandboxes/snapshots`, {
        query: {
          project: params.projectId,
          name: params.name,
          limit: params.limit,
          cursor: params.cursor,
          sortOrder: params.sortOrder,
        },
        method: "GET",
        signal: params.signal,
      }),
    );
  }

  async getSnapshotTree(params: {
    /**
     * The ID or name of the project to which the snapshots belong.
     */
    projectId: string;
    /**
     * The snapshot ID to use as the anchor for the tree traversal.
     */
    snapshotId: string;
    /**
     * Maximum number of nodes to return.
     */
    limit?: number;
    /**
     * Sort order: "asc" for descendants, "desc" for ancestors.
     */
    sortOrder?: "asc" | "desc";
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      SnapshotTreeResponse,
      await this.request(`/v2/sandboxes/snapshots/tree`, {
        query: {
          project: params.projectId,
          snapshotId: params.snapshotId,
          limit: params.limit,
          sortOrder: params.sortOrder,
        },
        method: "GET",
        signal: params.signal,
      }),
    );
  }

  async writeFiles(params: {
    sessionId: string;
    cwd: string;
    files: {
      path: string;
      content: string | Uint8Array;
      mode?: number;
    }[];
    extractDir: string;
    signal?: AbortSignal;
  }) {
    const { writer, response } = this.getFileWriter({
      sessionId: params.sessionId,
      extractDir: params.extractDir,
      signal: params.signal,
    });

    for (const file of params.files) {
      await writer.addFile({
        name: normalizePath({
          filePath: file.path,
          extractDir: params.extractDir,
          cwd: params.cwd,
        }),
        content: file.content,
        mode: file.mode,
      });
    }

    writer.end();
    await parseOrThrow(EmptyResponse, await response);
  }

  async readFile(params: {
    sessionId: string;
    path: string;
    cwd?: string;
    signal?: AbortSignal;
  }): Promise<Readable | null> {
    const response = await this.request(
      `/v2/sandboxes/sessions/${params.sessionId}/fs/read`,
      {
        method: "POST",
        body: JSON.stringify({ path: params.path, cwd: params.cwd }),
        signal: params.signal,
      },
    );

    if (response.status === 404) {
      return null;
    }

    // The file endpoint must return the file as an octet-stream. Any other
    // content type (e.g. application/json) indicates an error payload that
    // would otherwise be piped verbatim into the destination file.
    const contentType = response.headers.get("content-type") ?? "";
    if (!response.ok || !contentType.includes("application/octet-stream")) {
      const text = await response.text().catch(() => "");
      let json: unknown;
      try {
        json = JSON.parse(text || "{}");
      } catch {
        json = undefined;
      }
      throw new APIError(response, {
        message: `Unexpected response reading file: status ${response.status}, content-type ${contentType || "(none)"}`,
        json,
        text,
      });
    }

    if (response.body === null) {
      return null;
    }

    return Readable.fromWeb(response.body);
  }

  async killCommand(params: {
    sessionId: string;
    commandId: string;
    signal: number;
    abortSignal?: AbortSignal;
  }) {
    return parseOrThrow(
      CommandResponse,
      await this.request(
        `/v2/sandboxes/sessions/${params.sessionId}/cmd/${params.commandId}/kill`,
        {
          method: "POST",
          body: JSON.stringify({ signal: params.signal }),
          signal: params.abortSignal,
        },
      ),
    );
  }

  getLogs(params: {
    sessionId: string;
    cmdId: string;
    signal?: AbortSignal;
  }): AsyncGenerator<LogOutputLine, void, void> &
    Disposable & { close(): void } {
    const self = this;
    const disposer = new AbortController();
    const signal = !params.signal
      ? disposer.signal
      : mergeSignals(params.signal, disposer.signal);

    const generator = (async function* () {
      const url = `/v2/sandboxes/sessions/${params.sessionId}/cmd/${params.cmdId}/logs`;
      const response = await self.request(url, {
        method: "GET",
        signal,
      });

      if (!response.ok) {
        await parseOrThrow(z.any(), response);
      }

      if (response.headers.get("content-type") !== "application/x-ndjson") {
        throw new APIError(response, {
          message: "Expected a stream of logs",
          sessionId: params.sessionId,
        });
      }

      if (response.body === null) {
        throw new APIError(response, {
          message: "No response body",
          sessionId: params.sessionId,
        });
      }

      const jsonlinesStream = jsonlines.parse();
      pipe(response.body, jsonlinesStream, { signal }).catch((err) => {
        console.error("Error piping logs:", err);
      });

      for await (const chunk of jsonlinesStream) {
        const parsed = LogLine.parse(chunk);
        if (parsed.stream === "error") {
          throw new StreamError(
            parsed.data.code,
            parsed.data.message,
            params.sessionId,
          );
        }
        yield parsed;
      }
    })();

    return Object.assign(generator, {
      [Symbol.dispose]() {
        disposer.abort("Disposed");
      },
      close: () => disposer.abort("Disposed"),
    });
  }

  async stopSession(params: {
    sessionId: string;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof StopSessionResponse>>> {
    const url = `/v2/sandboxes/sessions/${params.sessionId}/stop`;
    return parseOrThrow(
      StopSessionResponse,
      await this.request(url, { method: "POST", signal: params.signal }),
    );
  }

  async updateNetworkPolicy(params: {
    sessionId: string;
    networkPolicy: NetworkPolicy;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof SessionResponse>>> {
    const url = `/v2/sandboxes/sessions/${params.sessionId}/network-policy`;
    return parseOrThrow(
      SessionResponse,
      await this.request(url, {
        method: "POST",
        body: JSON.stringify(toAPINetworkPolicy(params.networkPolicy)),
        signal: params.signal,
      }),
    );
  }

  async extendTimeout(params: {
    sessionId: string;
    duration: number;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof SessionResponse>>> {
    const url = `/v2/sandboxes/sessions/${params.sessionId}/extend-timeout`;
    return parseOrThrow(
      SessionResponse,
      await this.request(url, {
        method: "POST",
        body: JSON.stringify({ duration: params.duration }),
        signal: params.signal,
      }),
    );
  }

  async createSnapshot(params: {
    sessionId: string;
    expiration?: number;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof CreateSnapshotResponse>>> {
    const url = `/v2/sandboxes/sessions/${params.sessionId}/snapshot`;
    const body =
      params.expiration === undefined
        ? undefined
        : JSON.stringify({ expiration: params.expiration });
    return parseOrThrow(
      CreateSnapshotResponse,
      await this.request(url, {
        method: "POST",
        body,
        signal: params.signal,
      }),
    );
  }

  async deleteSnapshot(params: {
    snapshotId: string;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof SnapshotResponse>>> {
    const url = `/v2/sandboxes/snapshots/${params.snapshotId}`;
    return parseOrThrow(
      SnapshotResponse,
      await this.request(url, { method: "DELETE", signal: params.signal }),
    );
  }

  async getSnapshot(params: {
    snapshotId: string;
    signal?: AbortSignal;
  }): Promise<Parsed<z.infer<typeof SnapshotResponse>>> {
    const url = `/v2/sandboxes/snapshots/${params.snapshotId}`;
    return parseOrThrow(
      SnapshotResponse,
      await this.request(url, { signal: params.signal }),
    );
  }

  async getSandbox(
    params: WithPrivate<{
      name: string;
      projectId: string;
      resume?: boolean;
      signal?: AbortSignal;
    }>,
  ) {
    const privateParams = getPrivateParams(params);
    const query: Record<string, string | undefined> = {
      projectId: params.projectId,
      ...privateParams,
    };
    if (params.resume !== undefined) {
      query.resume = String(params.resume);
    }
    return parseOrThrow(
      SandboxAndSessionResponse,
      await this.request(`/v2/sandboxes/${encodeURIComponent(params.name)}`, {
        query,
        signal: params.signal,
      }),
    );
  }

  async listSandboxes(params: {
    projectId: string;
    limit?: number;
    sortBy?: "createdAt" | "name" | "statusUpdatedAt";
    sortOrder?: "asc" | "desc";
    namePrefix?: string;
    cursor?: string;
    tags?: Record<string, string>;
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      SandboxesPaginationResponse,
      await this.request(`/v2/sandboxes`, {
        query: {
          project: params.projectId,
          limit: params.limit,
          sortBy: params.sortBy,
          sortOrder: params.sortOrder,
          namePrefix: params.namePrefix,
          cursor: params.cursor,
          tags: toTagsFilter(params.tags),
        },
        method: "GET",
        signal: params.signal,
      }),
    );
  }

  async updateSandbox(params: {
    name: string;
    projectId: string;
    persistent?: boolean;
    resources?: { vcpus?: number; memory?: number };
    timeout?: number;
    networkPolicy?: NetworkPolicy;
    tags?: Record<string, string>;
    ports?: number[];
    snapshotExpiration?: number;
    keepLastSnapshots?: {
      count: number;
      expiration?: number;
      deleteEvicted?: boolean;
    } | null;
    currentSnapshotId?: string;
    region?: SandboxRegion;
    failoverRegions?: SandboxRegion[];
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      UpdateSandboxResponse,
      await this.request(`/v2/sandboxes/${encodeURIComponent(params.name)}`, {
        method: "PATCH",
        query: {
          projectId: params.projectId,
        },
        body: JSON.stringify({
          persistent: params.persistent,
          resources: params.resources,
          timeout: params.timeout,
          networkPolicy: params.networkPolicy
            ? toAPINetworkPolicy(params.networkPolicy)
            : undefined,
          tags: params.tags,
          ports: params.ports,
          snapshotExpiration: params.snapshotExpiration,
          keepLastSnapshots: params.keepLastSnapshots,
          currentSnapshotId: params.currentSnapshotId,
          region: params.region,
          failoverRegions: params.failoverRegions,
        }),
        signal: params.signal,
      }),
    );
  }

  async deleteSandbox(params: {
    name: string;
    projectId: string;
    signal?: AbortSignal;
  }) {
    return parseOrThrow(
      UpdateSandboxResponse,
      await this.request(`/v2/sandboxes/${encodeURIComponent(params.name)}`, {
        method: "DELETE",
        query: {
          projectId: params.projectId,
        },
        signal: params.signal,
      }),
    );
  }
}

async function pipe(
  readable: ReadableStream<Uint8Array>,
  output: NodeJS.WritableStream,
  options?: { signal?: AbortSignal },
) {
  const reader = readable.getReader();
  let aborted = false;

  const signal = options?.signal;
  const onAbort = () => {
    aborted = true;
    const reason =
      signal?.reason ??
      new DOMException("The operation was aborted.", "AbortError");
    void reader.cancel(reason).catch(() => {
      // ignore cancel errors when aborting
    });

    if ("destroy" in output && typeof output.destroy === "function") {
      output.destroy(reason as Error);
      return;
    }

    output.emit("error", reason);
    output.end();
  };

  if (signal) {
    if (signal.aborted) {
      onAbort();
    } else {
      signal.addEventListener("abort", onAbort, { once: true });
    }
  }

  try {
    while (true) {
      const read = await reader.read();
      if (read.value) {
        output.write(Buffer.from(read.value));
      }
      if (read.done) {
        break;
      }
    }
  } catch (err) {
    if (!aborted) {
      output.emit("error", err);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    if (!aborted) {
      output.end();
    }
  }
}

function mergeSignals(...signals: [AbortSignal, ...AbortSignal[]]) {
  const controller = new AbortController();
  const onAbort = () => {
    controller.abort();
    for (const signal of signals) {
      signal.removeEventListener("abort", onAbort);
    }
  };
  for (const signal of signals) {
    if (signal.aborted) {
      controller.abort();
      break;
    }
    signal.addEventListener("abort", onAbort);
  }
  return controller.signal;
}

function toTagsFilter(
  tags: Record<string, string> | undefined,
): string[] | undefined {
  if (tags === undefined) return undefined;
  const entries = Object.entries(tags);
  if (entries.length === 0) return undefined;
  return entries.map(([key, value]) => `${key}:${value}`);
}
