// Package extsettings reads the settings Cluster API passes to the extension's hooks:
// the spec.settings of the ExtensionConfig that registers them (disableInPlaceUpdates
// makes every change a replacement). The in-place-only guard and the single-node
// control-plane path decide without a hook call, so they read the same settings
// through one Reader, named by the extension's --extension-config-name.
//
// Imports: apimachinery, controller-runtime's client.
package extsettings
