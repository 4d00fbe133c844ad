// Desktops of scalecua: Thunderbird as on OSWorld's VM image, past its first run. These
// are defaults: a profile a task unpacks into ~/.thunderbird overrides any of them.
// No account wizard on a profile without accounts, no "Know your rights" bar, no start
// page, privacy tab or notifications fetched from the web (a desktop has no network).
pref("mail.provider.suppress_dialog_on_startup", true);
pref("mail.rights.version", 1);
pref("mailnews.start_page.enabled", false);
pref("datareporting.policy.dataSubmissionPolicyBypassNotification", true);
pref("datareporting.policy.firstRunURL", "");
pref("toolkit.telemetry.reportingpolicy.firstRun", false);
pref("mail.inappnotifications.enabled", false);
pref("mail.shell.checkDefaultClient", false);
