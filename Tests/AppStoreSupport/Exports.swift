// The demo signer is what these peers serve and what every App Store test signs with: tests
// import this module alone.
@_exported import DemoSigner
