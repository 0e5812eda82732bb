; Inno Setup script for Beamwise on Windows: installs the one-folder app that packaging/build.py made and adds
; a Start-menu entry (and an optional desktop icon). build.py runs it with absolute paths, as in (from the
; repository's folder, in cmd):
;   iscc /DAppVersion=0.1.0 /DSourceDir=%CD%\dist\Beamwise /O%CD%\dist packaging\beamwise.iss
; A relative SourceDir would be read from this script's folder (packaging\), not the current one; left out,
; it is ..\dist\Beamwise from here. Per-user install: no administrator rights needed. 64-bit Windows only
; (x64, or Arm64 with x64 emulation): the app's torch and Qt are x64 builds.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef SourceDir
  #define SourceDir "..\dist\Beamwise"
#endif

[Setup]
AppId={{5B7E3C1A-6F0D-4C57-9A0B-BE4A1D2C9E31}
AppName=Beamwise
AppVersion={#AppVersion}
AppPublisher=Beamwise
DefaultDirName={autopf}\Beamwise
DefaultGroupName=Beamwise
PrivilegesRequired=lowest
OutputBaseFilename=Beamwise-{#AppVersion}-setup
SetupIconFile=beamwise.ico
UninstallDisplayIcon={app}\beamwise-gui.exe
Compression=lzma2
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Beamwise"; Filename: "{app}\beamwise-gui.exe"
; The prompt puts {app} first on its own PATH (no one else's, no administrator) so that `beamwise run ...` works
; there, and starts in Documents: relative paths (--db my.db) are the user's, not files in the app's folder.
Name: "{group}\Beamwise command prompt"; Filename: "{cmd}"; Parameters: "/k set ""PATH={app};%PATH%"" && beamwise --help"; WorkingDir: "{userdocs}"
Name: "{group}\Uninstall Beamwise"; Filename: "{uninstallexe}"
Name: "{autodesktop}\Beamwise"; Filename: "{app}\beamwise-gui.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\beamwise-gui.exe"; Description: "{cm:LaunchProgram,Beamwise}"; Flags: nowait postinstall skipifsilent
