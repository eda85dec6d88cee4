import { invalidArgument } from "../errors.js";
import { normalizePassword } from "./passwords.js";

/**
 * The password policy, after NIST SP 800-63B §5.1.1.2: a minimum and a maximum length,
 * no composition rules (no "one digit, one symbol"), and a refusal of passwords that are
 * known to be common, predictable or taken from the context (the username, the service).
 * Lengths count Unicode code points of the password's NFKC form, the form that is hashed and
 * compared, so that "pässwörd" is eight characters however its accents were typed.
 */

export const minPasswordLength = 12;
export const maxPasswordLength = 1024;

const length = (text: string): number => [...text].length;

const fold = (text: string): string => text.normalize("NFKC").toLowerCase();

/**
 * Common passwords that are long enough to pass the length rule; shorter ones are refused
 * by length already. Written for this project from the patterns that lead breach
 * corpora: a common word with a number or year appended, keyboard walks, phrases.
 * Lower case; compared case-insensitively.
 */
const commonPhrases = [
  "correct horse battery staple",
  "correcthorsebatterystaple",
  "thequickbrownfox",
  "thequickbrownfoxjumpsoverthelazydog",
  "passwordpassword",
  "password1password1",
  "letmeinletmein",
  "iloveyouforever",
  "iloveyousomuch",
  "iloveyoubaby",
  "iloveyoutoo123",
  "trustno1trustno1",
  "opensesame123",
  "ihateyou1234",
  "mypasswordis",
  "thisismypassword",
  "thisisapassword",
  "changemenow123",
  "changethispassword",
  "dontforgetme",
  "nopasswordhere",
  "supersecretpassword",
  "verysecurepassword",
  "mysecretpassword",
  "secretpassword",
  "strongpassword",
  "securepassword",
  "defaultpassword",
  "temporarypassword",
  "temppassword123",
  "administrator",
  "administrator1",
  "administrator123",
  "adminadmin123",
  "adminpassword",
  "rootpassword",
  "rootroot1234",
  "1q2w3e4r5t6y",
  "1q2w3e4r5t6y7u",
  "q1w2e3r4t5y6",
  "1qaz2wsx3edc",
  "1qaz2wsx3edc4rfv",
  "zaq12wsxcde3",
  "zaq1xsw2cde3",
  "qazwsxedcrfv",
  "qazwsxedcrfvtgb",
  "1qazxsw23edc",
  "!qaz2wsx#edc",
  "a1b2c3d4e5f6",
  "a1b2c3d4e5f6g7",
  "aa1234567890",
  "abc123abc123",
  "abcd1234abcd",
  "abcd12345678",
  "abc123456789",
  "abcdef123456",
  "qwe123qwe123",
  "asd123asd123",
  "1234qwerasdf",
  "1234qwerasdfzxcv",
  "qwer1234qwer",
  "qwerty123456",
  "qwerty1234567",
  "qwertyqwerty",
  "qwertyuiop123",
  "qwertyuiop1234",
  "asdfghjkl123",
  "asdfasdfasdf",
  "zxcvbnm12345",
  "zxcvbnm123456",
  "passw0rd1234",
  "p@ssw0rd1234",
  "p@ssword1234",
  "p@$$w0rd1234",
  "pa55word1234",
  "pa$$word1234",
  "passw0rd!234",
  "p4ssw0rd1234",
  "password!234",
  "passw0rdpassw0rd",
  "manchesterunited",
  "manchesterunited1",
  "liverpoolfc123",
  "blink182blink182",
  "myspace12345",
  "facebook12345",
  "linkedin12345",
  "whatsapp12345",
  "starwars12345",
  "maytheforcebewithyou",
  "harrypotter1",
  "harrypotter123",
  "pokemon123456",
  "spiderman123",
  "spiderman1234",
  "superman12345",
  "batman123456",
  "michaeljordan",
  "chocolate123",
  "chocolate1234",
  "butterfly123",
  "butterfly1234",
  "sunshine1234",
  "sweetheart123",
  "happybirthday",
  "happybirthday1",
  "merrychristmas",
  "christmas2024",
  "helloworld123",
  "hellohello123",
  "welcomewelcome",
  "goodmorning123",
  "computer1234",
  "internet1234",
  "whatever1234",
  "nothing12345",
  "everything123",
  "football12345",
  "basketball12",
  "basketball123",
  "baseball1234",
  "soccer123456",
  "hockey123456",
  "princess1234",
  "princess12345",
  "jesuschrist1",
  "jesuslovesme",
  "godisgood123",
  "blessed12345",
  "mustang12345",
  "ferrari12345",
  "lamborghini1",
  "playstation1",
  "playstation2",
  "playstation3",
  "playstation4",
  "playstation5",
  "minecraft123",
  "minecraft1234",
  "fortnite1234",
  "leagueoflegends",
  "counterstrike",
  "worldofwarcraft",
  "photoshop123",
  "microsoft123",
  "microsoft1234",
  "google123456",
  "amazon123456",
  "samsung12345",
  "iphone123456",
  "apple1234567",
  "onetwothreefour",
  "abcdefghijk1",
  "0987654321qwerty",
  "letmein12345",
  "letmein123456",
  "letmeinplease",
  "welcome12345",
  "welcome123456",
  "welcome2024!",
  "welcome2025!",
  "changeme1234",
  "changeme12345",
  "traitgate123",
  "traitgate1234",
  "traitgateadmin",
  "traitgatepassword",
  "healthcare123",
  "healthcare1234",
  "hospital1234",
  "hospital12345",
  "clinician123",
  "clinician1234",
  "patient12345",
  "medical12345",
  "doctor123456",
  "nurse1234567",
];

/** Words that, with a common ending, make a common password. */
const commonWords = [
  "password",
  "iloveyou",
  "sunshine",
  "princess",
  "football",
  "baseball",
  "welcome",
  "dragon",
  "monkey",
  "master",
  "shadow",
  "qwerty",
  "letmein",
  "trustno1",
  "superman",
  "michael",
  "jennifer",
  "charlie",
  "jordan",
  "hunter",
  "summer",
  "winter",
  "spring",
  "autumn",
  "freedom",
  "liverpool",
  "chelsea",
  "arsenal",
  "computer",
  "starwars",
  "secret",
  "admin",
  "login",
  "changeme",
  "traitgate",
];

/** Endings appended to common words; only combinations of 12 characters or more are kept. */
const commonEndings = [
  "1234",
  "12345",
  "123456",
  "1234567",
  "123!",
  "1234!",
  "!@#$",
  "2023",
  "2024",
  "2025",
  "2026",
  "2023!",
  "2024!",
  "2025!",
  "2026!",
  "@123",
  "@1234",
];

function buildBlocklist(): ReadonlySet<string> {
  const list = new Set(commonPhrases);
  for (const word of commonWords) {
    for (const ending of commonEndings) {
      const candidate = word + ending;
      if (length(candidate) >= minPasswordLength) list.add(candidate);
    }
  }
  return list;
}

export const commonPasswords: ReadonlySet<string> = buildBlocklist();

/** Runs of these (forwards or backwards, wrapping around) are predictable at any length. */
const sequences = ["0123456789", "abcdefghijklmnopqrstuvwxyz", "qwertyuiopasdfghjklzxcvbnm"];

function isSequence(folded: string): boolean {
  return sequences.some((sequence) => {
    const cycle = sequence.repeat(Math.ceil(folded.length / sequence.length) + 1);
    return cycle.includes(folded) || [...cycle].reverse().join("").includes(folded);
  });
}

/** One to four characters repeated: "aaaaaaaaaaaa", "abababababab", "passpasspass". */
const repeatedUnit = /^(.{1,4})\1+$/su;

export type PasswordProblem = "PASSWORD_TOO_SHORT" | "PASSWORD_TOO_LONG" | "PASSWORD_TOO_COMMON";

/** What is wrong with a password under the policy, or undefined when it is acceptable. */
export function passwordProblem(password: string, username?: string): PasswordProblem | undefined {
  const n = length(normalizePassword(password));
  if (n < minPasswordLength) return "PASSWORD_TOO_SHORT";
  if (n > maxPasswordLength) return "PASSWORD_TOO_LONG";
  const folded = fold(password);
  if (
    commonPasswords.has(folded) ||
    (username !== undefined && folded === fold(username)) ||
    repeatedUnit.test(folded) ||
    isSequence(folded)
  ) {
    return "PASSWORD_TOO_COMMON";
  }
  return undefined;
}

const messages: Record<PasswordProblem, string> = {
  PASSWORD_TOO_SHORT: `password must be at least ${minPasswordLength} characters`,
  PASSWORD_TOO_LONG: `password must be at most ${maxPasswordLength} characters`,
  PASSWORD_TOO_COMMON: "password is too common or too easy to guess; choose another",
};

/**
 * Throws `invalid_argument` naming the field `password` (reason PASSWORD_TOO_SHORT,
 * PASSWORD_TOO_LONG or PASSWORD_TOO_COMMON) when the password breaks the policy.
 * `username`: the account's, refused as a password in any letter case.
 */
export function checkPasswordPolicy(password: string, username?: string, field = "password"): void {
  const problem = passwordProblem(password, username);
  if (problem !== undefined) {
    throw invalidArgument(problem, messages[problem], { field });
  }
}
