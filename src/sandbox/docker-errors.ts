/** Typed errors of the Docker sandbox provider. Activities map them to Temporal failures by `code`. */

/** Stable codes; activities use them as `ApplicationFailure` types and workflows match on them. */
export const DockerSandboxErrorCode = {
  /** The engine is not installed, not running or not reachable (retryable once an operator starts it). */
  DockerUnavailable: 'DockerUnavailable',
  /** The sandbox image is not present on the engine (nothing can be pulled; build it). */
  SandboxImageMissing: 'SandboxImageMissing',
  /** The run's container disappeared or stopped, possibly mid-turn; the workspace on the host is intact. */
  SandboxContainerGone: 'SandboxContainerGone',
  /** The requested network policy cannot be enforced by this provider or engine. */
  SandboxPolicyRefused: 'SandboxPolicyRefused',
} as const;

export type DockerSandboxErrorCode = (typeof DockerSandboxErrorCode)[keyof typeof DockerSandboxErrorCode];

/** Base class: every Docker sandbox failure carries a stable `code` and whether retrying can help. */
export class DockerSandboxError extends Error {
  constructor(
    readonly code: DockerSandboxErrorCode,
    message: string,
    /** Whether retrying the same call later may succeed without anyone changing configuration. */
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = code;
  }
}

/** The Docker engine is missing or unreachable. */
export class DockerUnavailable extends DockerSandboxError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super(
      DockerSandboxErrorCode.DockerUnavailable,
      `Docker engine unavailable (${detail}). Start one (in CI: \`eval "$(.ci/docker-engine.sh)"\`) ` +
        'and set DOCKER_HOST to its socket (e.g. unix:///tmp/dockerd/docker.sock), or use the local sandbox provider.',
      true,
      options,
    );
  }
}

/** The configured sandbox image is not on the engine. */
export class SandboxImageMissing extends DockerSandboxError {
  constructor(
    readonly image: string,
    options?: { cause?: unknown },
  ) {
    super(
      DockerSandboxErrorCode.SandboxImageMissing,
      `Sandbox image ${JSON.stringify(image)} is not on the Docker engine. Build it: offline test image with ` +
        '`scripts/build-sandbox-image.sh`, real image with `docker build -f docker/sandbox.Dockerfile -t IMAGE .`.',
      false,
      options,
    );
  }
}

/** The run's container is gone or stopped; `start()` again recreates it on the same workspace. */
export class SandboxContainerGone extends DockerSandboxError {
  constructor(
    readonly container: string,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      DockerSandboxErrorCode.SandboxContainerGone,
      `Sandbox container ${container} is gone (${detail}). The workspace on the host is intact; starting the ` +
        'sandbox again recreates the container on it.',
      true,
      options,
    );
  }
}

/** A network policy the provider cannot enforce; it refuses rather than pretends. */
export class SandboxPolicyRefused extends DockerSandboxError {
  constructor(detail: string) {
    super(DockerSandboxErrorCode.SandboxPolicyRefused, detail, false);
  }
}

/** Whether `error` is a Docker sandbox error (by `code`, so it survives duplicated module copies). */
export function isDockerSandboxError(error: unknown): error is DockerSandboxError {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && Object.values<string>(DockerSandboxErrorCode).includes(code);
}
