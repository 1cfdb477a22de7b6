"""response"""
