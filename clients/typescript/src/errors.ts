// sluice's errors: every one is a SluiceError; callers branch with instanceof on the subclasses.
// A door (gRPC, HTTP, Redis) maps what went wrong to one of these, so that code written against one
// door handles another's failures unchanged.

export class SluiceError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Bad input, refused before anything was consumed; field names the offending field. */
export class InvalidArgumentError extends SluiceError {
  readonly field: string;
  readonly reason: string;
  constructor(field: string, reason: string) {
    super(`sluice: invalid ${field}: ${reason}`);
    this.field = field;
    this.reason = reason;
  }
}

/** The policy named is not one the service holds. */
export class PolicyNotFoundError extends SluiceError {}

/** The door or the store cannot do this for the policy's strategy. */
export class OperationNotSupportedError extends SluiceError {}

/**
 * The service or store could not answer, and the fail mode is closed (or the call is not a check).
 * failMode is "closed" when the service itself refused a check because its store could not answer
 * and the policy fails closed; undefined when the service was not reached or said nothing of it.
 */
export class ServiceUnavailableError extends SluiceError {
  readonly failMode: "closed" | undefined;
  constructor(message: string, options?: ErrorOptions & { failMode?: "closed" }) {
    super(message, options);
    this.failMode = options?.failMode;
  }
}

/** The service refused the token (or its absence), or the token lacks the scope the call needs. */
export class UnauthenticatedError extends SluiceError {}
