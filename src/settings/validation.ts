import { type DomainError, invalidArgument } from "../errors.js";
import { checkValue, definitionOf, type SettingProblem, type SettingValue } from "./registry.js";

/** Validation of an update's values against the registry: every bad key is reported at once. */

export const maxReportedKeys = 50;

export interface Bad {
  key: string;
  problem: SettingProblem | "EMPTY_UPDATE";
  message: string;
}

/** A key as it may appear in an error or the audit log: bounded, printable. */
export const shown = (key: string): string => key.replace(/[^\x20-\x7e]/g, "?").slice(0, 128);

export function invalidSettings(bad: Bad[]): DomainError {
  const listed = bad.slice(0, maxReportedKeys);
  const keys = listed.map((b) => shown(b.key));
  return invalidArgument(
    "INVALID_SETTING",
    `invalid settings: ${listed.map((b) => `${shown(b.key)}: ${b.message}`).join("; ")}`,
    {
      field: keys[0] ?? "values",
      metadata: { keys: keys.join(","), problems: listed.map((b) => b.problem).join(",") },
    },
  );
}

/** Checks each posted value against the registry; every bad key is reported. */
export function validateUpdate(
  values: Readonly<Record<string, unknown>>,
): Map<string, SettingValue | null> {
  const keys = Object.keys(values);
  if (keys.length === 0) {
    throw invalidArgument("EMPTY_UPDATE", "the update names no setting", { field: "values" });
  }
  const bad: Bad[] = [];
  const accepted = new Map<string, SettingValue | null>();
  for (const key of keys) {
    const def = definitionOf(key);
    if (def === undefined) {
      bad.push({ key, problem: "UNKNOWN_SETTING", message: "no such setting" });
      continue;
    }
    const value = values[key];
    if (value === null) {
      accepted.set(key, null);
      continue;
    }
    const checked = checkValue(def, value);
    if (checked.ok) accepted.set(key, checked.value);
    else bad.push({ key, problem: checked.problem, message: checked.message });
  }
  if (bad.length > 0) throw invalidSettings(bad);
  return accepted;
}
